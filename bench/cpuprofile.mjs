/**
 * Summarises a V8 CPU profile (a `.cpuprofile` written by `node --cpu-prof`), e.g. of the bench
 * bundle: `node --expose-gc --cpu-prof --cpu-prof-dir=/tmp/prof node_modules/.cache/tiller-bench/index.mjs --only=w4`.
 *
 *   node bench/cpuprofile.mjs FILE                    the 40 functions with the most self time
 *   node bench/cpuprofile.mjs FILE --inclusive        the same by inclusive time (each function once per stack)
 *   node bench/cpuprofile.mjs FILE --callers NAME [D] where NAME's self time comes from: D callers deep (default 4)
 *
 * Functions are named `name file:line` (the line in the bundle when the profile is of a bundle).
 */
import { readFileSync } from "node:fs"

const [file, mode, name, depthArg] = process.argv.slice(2)
if (file === undefined) {
  console.error("usage: node bench/cpuprofile.mjs FILE [--inclusive | --callers NAME [DEPTH]]")
  process.exit(2)
}
const profile = JSON.parse(readFileSync(file, "utf8"))
const nodes = new Map(profile.nodes.map((node) => [node.id, node]))
const parents = new Map()
for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id)
// Microseconds of samples per leaf node.
const selfTime = new Map()
profile.samples.forEach((id, i) => selfTime.set(id, (selfTime.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))
const label = (node) =>
  `${node.callFrame.functionName || "(anonymous)"} ${node.callFrame.url.split("/").slice(-2).join("/")}:${
    node.callFrame.lineNumber + 1
  }`
const stackOf = function*(id) {
  for (let at = id; at !== undefined; at = parents.get(at)) yield nodes.get(at)
}

const totals = new Map()
const add = (key, micros) => totals.set(key, (totals.get(key) ?? 0) + micros)
for (const [id, micros] of selfTime) {
  if (mode === "--callers") {
    const [leaf, ...callers] = [...stackOf(id)]
    if (leaf.callFrame.functionName !== name) continue
    add(callers.slice(0, Number(depthArg ?? 4)).map(label).join(" < "), micros)
  } else if (mode === "--inclusive") {
    for (const key of new Set([...stackOf(id)].map(label))) add(key, micros)
  } else {
    add(label(nodes.get(id)), micros)
  }
}
const all = [...selfTime.values()].reduce((a, b) => a + b, 0)
console.log(`profile: ${(all / 1000).toFixed(0)} ms of samples`)
for (const [key, micros] of [...totals].sort((a, b) => b[1] - a[1]).slice(0, 40)) {
  console.log(`${(micros / 1000).toFixed(1).padStart(9)} ms ${(100 * micros / all).toFixed(1).padStart(5)}%  ${key}`)
}
