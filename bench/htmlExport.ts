/**
 * The HTML export at 100,000 events: a session's events (`tiller log ID --json` output) repeated,
 * turn by turn, to 100,000 events; prints the time `renderHtml` takes, the page's size, and the
 * client side's work as node measures it (JSON.parse of the embedded data, the `tillerModel` fold).
 *
 * Run: `npx esbuild bench/htmlExport.ts --bundle --platform=node --format=esm --packages=external
 * --outfile=node_modules/.cache/tiller-bench/htmlExport.mjs && node node_modules/.cache/tiller-bench/htmlExport.mjs LOG.jsonl [EVENTS]`
 *
 * @since 0.1.0
 */
import { readFileSync } from "node:fs"
import { renderHtml } from "../src/cli/HtmlExport.js"
import { PAGE_SCRIPT } from "../src/cli/HtmlPage.js"

const base = readFileSync(process.argv[2]!, "utf8").trim().split("\n").map((line) => JSON.parse(line))
const target = Number(process.argv[3] ?? 100_000)
const turns = base.filter((e) => e.type === "turn/start").length
const events: Array<any> = []
for (let round = 0; events.length < target; round++) {
  for (const e of base) {
    const copy = JSON.parse(JSON.stringify(e))
    copy.seq = events.length
    copy.time = 1_700_000_000_000 + events.length * 10
    if (typeof copy.data?.turn === "number") copy.data.turn += round * turns
    if (copy.type === "user/message") copy.data.id = `${copy.data.id}-${round}`
    for (const m of copy.data?.inserted ?? []) m.id = `${m.id}-${round}`
    if (copy.sourceEventSeqs) copy.sourceEventSeqs = copy.sourceEventSeqs.map((s: number) => s + (copy.seq - e.seq))
    events.push(copy)
    if (events.length >= target) break
  }
}
const header = { formatVersion: 1, sessionId: "bench-html", createdAt: 1_700_000_000_000, seedLength: 0 }
let t = performance.now()
const page = renderHtml(header as any, events)
const renderMs = performance.now() - t
const from = page.indexOf("id=\"tiller-data\">") + "id=\"tiller-data\">".length
const json = page.slice(from, page.indexOf("</script>", from))
t = performance.now()
const data = JSON.parse(json)
const parseMs = performance.now() - t
const model = new Function(`${PAGE_SCRIPT}\nreturn tillerModel`)()
t = performance.now()
const rows = model(data).rows.length
const modelMs = performance.now() - t
console.log(`${events.length} events: renderHtml ${renderMs.toFixed(0)} ms, page ${(Buffer.byteLength(page) / 1024 / 1024).toFixed(1)} MiB (${data.events.length} events embedded); ` +
  `client: JSON.parse ${parseMs.toFixed(0)} ms, tillerModel ${modelMs.toFixed(0)} ms for ${rows} rows`)
