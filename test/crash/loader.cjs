// Starts the bundled crash-test child (CommonJS) with a V8 code cache: `node loader.cjs <bundle>
// ...args`. The cache sits beside the bundle (`<bundle>.v8cache`); with it the child compiles
// almost nothing at start. A run without a cache writes one when it gets SIGTERM, covering every
// function compiled so far; a cache V8 rejects (another Node version) only makes the start slower.
"use strict"
const fs = require("node:fs")
const Module = require("node:module")
const path = require("node:path")
const vm = require("node:vm")

const bundle = path.resolve(process.argv[2])
process.argv.splice(2, 1)
const cacheFile = `${bundle}.v8cache`

let cachedData
try {
  cachedData = fs.readFileSync(cacheFile)
} catch {
  cachedData = undefined
}
const script = new vm.Script(Module.wrap(fs.readFileSync(bundle, "utf8")), { filename: bundle, cachedData })

if (cachedData === undefined) {
  process.on("SIGTERM", () => {
    const temporary = `${cacheFile}.${process.pid}.tmp`
    fs.writeFileSync(temporary, script.createCachedData())
    fs.renameSync(temporary, cacheFile)
    process.exit(0)
  })
}

const module_ = { exports: {} }
script.runInThisContext().call(
  module_.exports,
  module_.exports,
  Module.createRequire(bundle),
  module_,
  bundle,
  path.dirname(bundle)
)
