/**
 * The README's screenshot of `tiller export ID --html FILE`: builds a real session through the CLI
 * (the offline demo model, and a local stand-in provider for one retried request) in a temporary
 * directory, exports it, opens the page in headless Chromium with the network off, opens the tool
 * result of turn 1 and writes `docs/html-export.png`.
 *
 * Run: `npm run screenshot` (Chromium from CHROMIUM_PATH, else TILLER_CHROMIUM, else /usr/bin/chromium:
 * Debian's `chromium`).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { chromium } from "playwright-core"
import { buildExportedSession, exportSession } from "../test/fixtures/exportedSession.js"

const CHROMIUM = process.env.CHROMIUM_PATH ?? process.env.TILLER_CHROMIUM ?? "/usr/bin/chromium"
const OUT = fileURLToPath(new URL("../docs/html-export.png", import.meta.url))

const screenshot = async (page: string): Promise<void> => {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
  })
  try {
    const context = await browser.newContext({
      offline: true,
      viewport: { width: 1280, height: 800 },
      deviceScaleFactor: 1,
      locale: "en-US",
      timezoneId: "UTC"
    })
    await context.route((url) => url.protocol !== "file:", (route) => route.abort())
    const tab = await context.newPage()
    await tab.goto(pathToFileURL(page).href)
    await tab.locator("#rows .row").first().waitFor()
    await tab.waitForFunction("window.tiller.loaded()")
    const tool = tab.locator(".row.k-tool", { hasText: "tool Read" })
    await tool.locator("details summary").click()
    await tool.locator("details pre").waitFor()
    await tab.screenshot({ path: OUT })
  } finally {
    await browser.close()
  }
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-screenshot-"))
try {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium or set CHROMIUM_PATH`)
  }
  const page = path.join(dir, "session.html")
  await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const id = yield* buildExportedSession(dir)
    yield* exportSession(dir, id, page)
  })))
  fs.mkdirSync(path.dirname(OUT), { recursive: true })
  await screenshot(page)
  console.log(`wrote ${path.relative(process.cwd(), OUT)}: ${(fs.statSync(OUT).size / 1024).toFixed(0)} KiB`)
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
