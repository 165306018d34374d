// ESLint (flat config) for tiller: typescript-eslint's recommended rules plus @effect/eslint-plugin,
// whose `@effect/dprint` rule formats the code as the Effect repository does. `npm run lint` checks;
// `npm run lint:fix` applies every formatting fix (and the few other fixable rules).
import * as effectEslint from "@effect/eslint-plugin"
import js from "@eslint/js"
import { defineConfig } from "eslint/config"
import globals from "globals"
import tseslint from "typescript-eslint"

export default defineConfig(
  {
    ignores: [
      "**/node_modules/**",
      "dist/**",
      "build/**",
      "docs/**",
      "coverage/**",
      "scratch/**",
      ".tiller/**",
      "bench/results/**",
      // Hook scripts written as published Claude Code hooks are (CommonJS, run by node directly).
      "test/layers/fixtures/claude-hooks/**"
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  ...effectEslint.configs.dprint,
  {
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: globals.node
    },
    rules: {
      // As in the Effect repository, except two rules: its ban on `push(...xs)` guards against
      // spreading arrays of ~100k elements, and tiller spreads only short lists (content blocks,
      // defects, chunks); unused locals and imports are the compiler's job (`noUnusedLocals`), and
      // unused parameters are allowed as in tsconfig.
      "no-fallthrough": "off",
      "no-irregular-whitespace": "off",
      "object-shorthand": "error",
      "prefer-destructuring": "off",
      "sort-imports": "off",
      "no-unused-vars": "off",
      "require-yield": "off",
      "prefer-rest-params": "off",
      "prefer-spread": "off",
      "@typescript-eslint/array-type": ["error", { default: "generic", readonly: "generic" }],
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-empty-object-type": "off",
      "@typescript-eslint/no-unsafe-function-type": "off",
      "@typescript-eslint/no-wrapper-object-types": "off",
      "@typescript-eslint/no-unused-vars": "off",
      // A `let` that a closure reads before its single assignment cannot be a `const`.
      "prefer-const": ["error", { ignoreReadBeforeAssign: true }],
      // Terminal output is matched and stripped with ANSI escapes (\x1b) in regular expressions.
      "no-control-regex": "off",
      "@typescript-eslint/ban-ts-comment": "off",
      "@typescript-eslint/explicit-function-return-type": "off",
      "@typescript-eslint/explicit-module-boundary-types": "off",
      "@typescript-eslint/no-array-constructor": "off",
      "@typescript-eslint/no-use-before-define": "off",
      "@typescript-eslint/no-namespace": "off",
      "@effect/dprint": [
        "error",
        {
          config: {
            indentWidth: 2,
            lineWidth: 120,
            semiColons: "asi",
            quoteStyle: "alwaysDouble",
            trailingCommas: "never",
            operatorPosition: "maintain",
            "arrowFunction.useParentheses": "force"
          }
        }
      ]
    }
  },
  {
    // Tests build invalid values on purpose: sparse arrays and number literals that JSON cannot
    // carry exactly are what the lossless-JSON checks must reject.
    files: ["test/**"],
    rules: {
      "no-sparse-arrays": "off",
      "no-loss-of-precision": "off"
    }
  },
  {
    files: ["**/*.cjs"],
    languageOptions: { sourceType: "commonjs" },
    rules: {
      "@typescript-eslint/no-require-imports": "off"
    }
  }
)
