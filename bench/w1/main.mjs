/**
 * Standalone entry of the W1 comparison: `node bench/w1/main.mjs [--quick] [--svg=FILE]
 * [--json=FILE] [--from=FILE]` (or `npm run w1 --prefix bench -- [--quick]`; see `run.ts`). Bundles `bench/w1/run.ts` with
 * esbuild into `node_modules/.cache/tiller-bench/` (dependencies external, as `npm run bench` does)
 * and runs it with the repository root as its working directory.
 */
import { buildSync } from "esbuild"
import { spawnSync } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")
const outfile = path.join(root, "node_modules", ".cache", "tiller-bench", "w1-run.mjs")
buildSync({
  entryPoints: [path.join(root, "bench", "w1", "run.ts")],
  bundle: true,
  platform: "node",
  format: "esm",
  packages: "external",
  target: "node20",
  logLevel: "warning",
  outfile
})
// File paths given to the run stay relative to where this entry was started.
const args = process.argv.slice(2).map((arg) => {
  const file = /^--(svg|json|from)=(.*)$/.exec(arg)
  return file === null ? arg : `--${file[1]}=${path.resolve(process.cwd(), file[2])}`
})
const child = spawnSync(process.execPath, ["--expose-gc", outfile, ...args], { cwd: root, stdio: "inherit" })
process.exitCode = child.status ?? 1
