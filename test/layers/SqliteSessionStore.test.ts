/**
 * The package root's `SqliteSessionStore` (SPEC 8.10): its layer loads the SQLite store when built,
 * and nothing the package root imports statically reaches the SQLite store's optional peers or
 * OTLP export's, so an application without them imports tiller and runs on the memory store.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import ts from "typescript"
import { SessionId, SessionStore, SqliteSessionStore } from "../../src/index.js"
import * as OptionalPeer from "../../src/internal/peers/OptionalPeer.js"

const SRC = path.resolve(import.meta.dirname, "../../src")

/** The module specifiers `file` imports statically at run time (no `import type`, no `import()`). */
const staticImports = (file: string): ReadonlyArray<string> => {
  const source = ts.createSourceFile(file, fs.readFileSync(file, "utf8"), ts.ScriptTarget.ES2022)
  const specifiers: Array<string> = []
  for (const statement of source.statements) {
    if (ts.isImportDeclaration(statement) && statement.importClause?.isTypeOnly !== true) {
      specifiers.push((statement.moduleSpecifier as ts.StringLiteral).text)
    } else if (ts.isExportDeclaration(statement) && !statement.isTypeOnly && statement.moduleSpecifier !== undefined) {
      specifiers.push((statement.moduleSpecifier as ts.StringLiteral).text)
    }
  }
  return specifiers
}

/** The packages the modules reached statically from `entry` import, each with a module importing it. */
const packagesReached = (entry: string): ReadonlyMap<string, string> => {
  const packages = new Map<string, string>()
  const seen = new Set<string>()
  const visit = (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    for (const specifier of staticImports(file)) {
      if (specifier.startsWith(".")) visit(path.resolve(path.dirname(file), specifier.replace(/\.js$/, ".ts")))
      else if (!specifier.startsWith("node:")) packages.set(specifier, path.relative(SRC, file))
    }
  }
  visit(entry)
  return packages
}

describe("SqliteSessionStore (package root)", () => {
  it("the package root reaches no optional peer statically", () => {
    const reached = packagesReached(path.join(SRC, "index.ts"))
    const optional = [...OptionalPeer.SQLITE.packages, ...OptionalPeer.OPENTELEMETRY.packages].map(([name]) => name)
    const offending = [...reached].filter(([specifier]) =>
      optional.some((name) => specifier === name || specifier.startsWith(`${name}/`))
    )
    expect(offending).toEqual([])
    // The walk does see packages: effect itself is reached.
    expect(reached.has("effect")).toBe(true)
  })

  it.scoped("its layer loads the store and opens a working database", () =>
    Effect.gen(function*() {
      const context = yield* Layer.build(SqliteSessionStore.layer({ filename: ":memory:" }))
      const store = yield* Effect.provide(SessionStore, context)
      expect(yield* store.exists(SessionId.make("absent"))).toBe(false)
      expect(yield* store.list).toEqual([])
    }))
})
