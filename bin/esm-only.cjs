// `require("tiller")`: tiller is an ES module package. Even where Node can require() an ES module,
// a CommonJS application would load effect's CommonJS build while tiller loads its ES module build:
// two copies of effect in one process. So require() is refused with what to do instead.
"use strict"
throw new Error(
  "tiller is ESM-only: use `import { Agent } from \"tiller\"` in an ES module (a .mjs file, or \"type\": \"module\" in " +
    "package.json), or `const tiller = await import(\"tiller\")` from CommonJS."
)
