/**
 * The standalone W1 comparison, bundled and started by `node bench/w1/main.mjs`: installs the
 * peers when needed, runs the comparison (progress on stderr) and prints the Markdown section on
 * stdout. Options: `--quick`; `--svg=FILE` writes the chart; `--json=FILE` writes the raw figures;
 * `--from=FILE` renders figures written by `--json` instead of running (with today's
 * description of each system). Nothing else is written.
 *
 * @since 0.1.0
 */
import { readFileSync, writeFileSync } from "node:fs"
import type { W1Compare } from "./compare.js"
import { ensurePeers, renderW1Compare, runW1Compare, w1Svg } from "./compare.js"
import { w1Systems } from "./systems.js"

const args = process.argv.slice(2)
const valueOf = (name: string): string | undefined =>
  args.find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3)
const unknown = args.filter((arg) =>
  arg !== "--quick" && !["svg", "json", "from"].some((name) => arg.startsWith(`--${name}=`))
)

const main = async (): Promise<void> => {
  if (unknown.length > 0) {
    throw new Error(`unknown arguments: ${unknown.join(" ")} (expected --quick, --svg=FILE, --json=FILE, --from=FILE)`)
  }
  const from = valueOf("from")
  let result: W1Compare
  if (from === undefined) {
    ensurePeers()
    result = await runW1Compare({ quick: args.includes("--quick"), log: (line) => console.error(line) })
  } else {
    const stored = JSON.parse(readFileSync(from, "utf8")) as W1Compare
    // Figures keep their numbers; each system's description is today's (matched by id).
    result = {
      ...stored,
      outcomes: stored.outcomes.map((o) => ({ ...o, system: w1Systems.find((s) => s.id === o.system.id) ?? o.system }))
    }
  }
  const json = valueOf("json")
  if (json !== undefined) writeFileSync(json, `${JSON.stringify(result, null, 2)}\n`)
  console.log(renderW1Compare(result))
  const svg = valueOf("svg")
  if (svg !== undefined) writeFileSync(svg, w1Svg(result))
}

main().catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
