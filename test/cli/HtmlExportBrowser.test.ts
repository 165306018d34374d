/**
 * `tiller export ID --html FILE` opened in headless Chromium (Debian's `chromium`, or the binary
 * named by TILLER_CHROMIUM), driven by playwright-core, with the network off: a real session made
 * through the CLI shows what a person would look for (the turn tree, collapsible; sources told apart;
 * a long tool result opened; kind and source filters; search; a deep link; a compaction marker
 * opened to its shadowed events; the inbox lane; a retry) and its screenshot is a PNG; a session of
 * 100,000 events shows its first rows within seconds.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import type { Browser, BrowserContext, Page } from "playwright-core"
import { chromium } from "playwright-core"
import { renderHtml } from "../../src/cli/HtmlExport.js"
import type { SessionEvent, SessionHeader } from "../../src/domain/Event.js"
import { buildExportedSession, exportSession, sessionEvents } from "../fixtures/exportedSession.js"
import { repeatedHeader, repeatSession } from "../fixtures/repeatedSession.js"

const CHROMIUM = process.env.TILLER_CHROMIUM ?? "/usr/bin/chromium"

/**
 * The budget for the 100,000-event page to show its first rows, by the page's own clock from the
 * start of the navigation: the aim is 2 s; twice that leaves headroom for a loaded two-core machine.
 */
const OPEN_BUDGET_MS = 4_000

/** The budget for the same page to answer a click as seen from outside (the driver's own round trips included). */
const CLICK_BUDGET_MS = 15_000

let dir = ""
let page = ""
let events: ReadonlyArray<any> = []
let browser: Browser | undefined

beforeAll(async () => {
  // Fails (not skips) when the browser is missing: .ci/run installs Debian's chromium.
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium or set TILLER_CHROMIUM`)
  }
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-html-browser-"))
  page = path.join(dir, "session.html")
  await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const id = yield* buildExportedSession(dir)
    yield* exportSession(dir, id, page)
    events = yield* sessionEvents(dir, id)
  })))
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
  })
}, 120_000)

afterAll(async () => {
  await browser?.close()
  if (dir !== "") fs.rmSync(dir, { recursive: true, force: true })
})

/** A page with the network off: every request that is not for a file:// URL is recorded and aborted. */
const offline = async (): Promise<
  {
    readonly context: BrowserContext
    readonly tab: Page
    readonly leaks: Array<string>
    readonly errors: Array<string>
  }
> => {
  const context = await browser!.newContext({ offline: true, viewport: { width: 1400, height: 900 } })
  const leaks: Array<string> = []
  const errors: Array<string> = []
  await context.route((url) => url.protocol !== "file:", (route) => {
    leaks.push(route.request().url())
    return route.abort()
  })
  const tab = await context.newPage()
  tab.on("request", (request) => {
    if (!request.url().startsWith("file:")) leaks.push(request.url())
  })
  tab.on("pageerror", (error) => errors.push(String(error)))
  return { context, tab, leaks, errors }
}

const seqOf = (type: string, where: (e: any) => boolean = () => true): number =>
  events.find((e) => e.type === type && where(e))!.seq

/** The visible rows' texts. */
const rowTexts = (tab: Page, selector = "#rows .row") => tab.locator(selector).allTextContents()

describe("the HTML export in Chromium", () => {
  it.live(
    "shows the turn tree, sources, a tool result, filters, search, a deep link, a compaction and the inbox lane",
    () =>
      Effect.promise(async () => {
        const { context, errors, leaks, tab } = await offline()
        await tab.goto(pathToFileURL(page).href)
        await tab.locator("#rows .row").first().waitFor()

        // The turn tree: four turns, each heading with why it ended, its steps and tokens; steps below.
        const turns = tab.locator(".row.k-turn")
        expect(await turns.locator(".toggle").allTextContents()).toEqual(["Turn 1", "Turn 2", "Turn 3", "Turn 4"])
        expect(await turns.nth(0).textContent()).toMatch(
          /Turn 1completed · 2 steps · [\d.]+ (ms|s) · \d+ in \/ \d+ out tokens/
        )
        expect(await turns.nth(2).textContent()).toContain("aborted (user) · 1 step")
        const step11 = tab.locator(".row.k-step", { hasText: "Step 1.1" })
        await expect.poll(() => step11.isVisible()).toBe(true)
        // Collapsing turn 1 hides its steps and messages; the rows between turns stay; opening it shows them again.
        await tab.locator("[data-toggle=\"t1\"]").click()
        await expect.poll(() => step11.count()).toBe(0)
        expect(await tab.locator("[data-toggle=\"t1\"]").getAttribute("class")).toContain("closed")
        expect(await tab.locator(".row.k-message", { hasText: "The user is in Paris." }).count()).toBe(0)
        expect(await tab.locator(".row.inbox", { hasText: "[user] /wait 1500" }).count()).toBe(2)
        await tab.locator("[data-toggle=\"t1\"]").click()
        await expect.poll(() => step11.count()).toBe(1)

        // Sources told apart by label and colour: a prompt, a steer, injected context, a compaction summary.
        const badge = (cls: string, text: string) =>
          tab.locator(`.row.k-message.${cls}, .row.k-compaction.${cls}`, { hasText: text }).locator(".badge").first()
        const labels = [
          badge("src-prompt", "/Read notes.txt"),
          badge("src-steer", "look at the clock too"),
          badge("src-context", "the meeting moved to 3 pm"),
          badge("src-summary", "Goal: /Read notes.txt")
        ]
        expect(await Promise.all(labels.map((l) => l.textContent()))).toEqual([
          "prompt",
          "steer",
          "context · cli:inject",
          "compaction summary"
        ])
        const colours = await Promise.all(
          labels.map((l) =>
            l.evaluate((el: unknown) => (globalThis as any).getComputedStyle(el).backgroundColor as string)
          )
        )
        expect(new Set(colours).size).toBe(4)
        // A prompt typed while the agent was idle starts a turn: it is a prompt, not a steer.
        expect(await tab.locator(".row.k-message", { hasText: "/wait 1500" }).locator(".badge").textContent()).toBe(
          "prompt"
        )

        // The long tool result is collapsed; opening it shows the whole text.
        const tool = tab.locator(".row.k-tool", { hasText: "tool Read" })
        expect(await tool.textContent()).not.toContain("line 300 of the notes")
        await tool.locator("details summary").click()
        await expect.poll(() => tool.textContent()).toContain("line 300 of the notes")

        // The retry: the failed attempt and the retry after it, then the answer of attempt 2.
        expect(await rowTexts(tab, ".row.k-retry")).toEqual([
          expect.stringMatching(/^#\d+request failedattempt 1: .*HTTP 503.*the model is overloaded/),
          expect.stringMatching(/^#\d+retryattempt 1 failed: .*retrying in \d+ ms/)
        ])
        expect(await tab.locator(".row.k-assistant", { hasText: "Hello from the second attempt." }).textContent())
          .toContain("attempt 2")

        // The inbox lane beside the conversation: inserted, claimed and discarded.
        const lane = tab.locator(".row.inbox", { hasText: "discarded · next-turn" }).locator(".lane")
        expect(await lane.textContent()).toContain("[user] a prompt for later")
        const laneBox = (await lane.boundingBox())!
        const mainBox =
          (await tab.locator(".row.k-message", { hasText: "look at the clock too" }).locator(".main").boundingBox())!
        expect(laneBox.x).toBeGreaterThanOrEqual(mainBox.x + mainBox.width)
        expect((await rowTexts(tab, ".row.inbox")).map((t) => t.replace(/^#\d+/, "").split(" · ")[0]))
          .toEqual([
            "inserted",
            "inserted",
            "claimed",
            "claimed",
            "inserted",
            "claimed",
            "inserted",
            "inserted",
            "claimed",
            "inserted",
            "claimed",
            "inserted",
            "discarded",
            "inserted",
            "claimed"
          ])

        // The compaction marker opens to the events it shadowed.
        const marker = tab.locator(".row.k-compaction", { hasText: "show the" })
        expect(await marker.textContent()).toMatch(
          /summary · manual · \d+ tokens before · \d+ tokens after · 4 events shadowed/
        )
        await marker.locator("details.shadowed summary").click()
        await expect.poll(() => marker.locator("details.shadowed div").allTextContents()).toEqual([
          expect.stringMatching(/^#6 \[cli:inject\] The user is in Paris\.$/),
          expect.stringMatching(/^#7 \[user\] \/Read notes\.txt$/),
          expect.stringMatching(/^#\d+ assistant: Calling Read\.$/),
          expect.stringMatching(/^#\d+ tool result:\s+1\s+line 1 of the notes/)
        ])

        // A kind filter: unticking "tool" hides the tool rows; a source filter keeps that source's messages.
        const all = await tab.locator("#count").textContent()
        await tab.locator("#kinds input[data-kind=\"tool\"]").uncheck()
        await expect.poll(() => tab.locator(".row.k-tool").count()).toBe(0)
        await tab.locator("#kinds input[data-kind=\"tool\"]").check()
        await expect.poll(() => tab.locator(".row.k-tool").count()).toBe(3)
        await tab.locator("#source").selectOption("cli:inject")
        await expect.poll(() => rowTexts(tab, ".row.k-message")).toEqual([
          expect.stringContaining("The user is in Paris."),
          expect.stringContaining("the meeting moved to 3 pm")
        ])
        await tab.locator("#source").selectOption("")
        await expect.poll(() => tab.locator("#count").textContent()).toBe(all)

        // Search narrows the rows to those that mention the text.
        await tab.locator("#search").fill("MEETING moved")
        await expect.poll(() => tab.locator("#count").textContent()).not.toBe(all)
        const found = await rowTexts(tab)
        expect(found.length).toBeGreaterThanOrEqual(3)
        expect(found.every((t) => t.toLowerCase().includes("meeting moved"))).toBe(true)
        await tab.locator("#search").fill("")
        await expect.poll(() => tab.locator("#count").textContent()).toBe(all)

        // The screenshot a person would see: a PNG.
        const shot = path.join(dir, "session.png")
        await tab.screenshot({ path: shot })
        const png = fs.readFileSync(shot)
        expect(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))).toBe(true)
        expect(png.length).toBeGreaterThan(10_000)

        // A deep link: FILE#seq-N opens the page scrolled to that seq's row, marked.
        const retry = seqOf("llm/retry")
        const linked = await context.newPage()
        await linked.goto(`${pathToFileURL(page).href}#seq-${retry}`)
        const target = linked.locator(".row.target")
        await target.waitFor()
        expect(await target.getAttribute("id")).toBe(`seq-${retry}`)
        expect(await target.textContent()).toContain("retrying in")
        const box = (await target.boundingBox())!
        expect(await linked.evaluate("window.scrollY")).toBeGreaterThan(0)
        expect(box.y).toBeGreaterThanOrEqual(0)
        expect(box.y + box.height).toBeLessThanOrEqual(900)
        // Following a seq link inside the page marks that row instead.
        const entered = seqOf("user/message", (e) => e.data.content[0].text === "look at the clock too")
        await linked.locator(`.row a.seq[href="#seq-${entered}"]`).click()
        await expect.poll(() => linked.locator(".row.target").getAttribute("id")).toBe(`seq-${entered}`)

        expect(errors).toEqual([])
        expect(leaks).toEqual([])
        await context.close()
      }),
    90_000
  )

  it.live(
    "a deep link FILE#seq-N shows its row below the sticky header, highlighted",
    () =>
      Effect.promise(async () => {
        const { context, errors, leaks } = await offline()
        // Rows near the start, in the middle and near the end: each seen whole below the header.
        const seqs = [
          seqOf("llm/retry"),
          seqOf("user/message", (e) => e.data.content[0].text === "look at the clock too"),
          events[Math.floor(events.length / 2)].seq,
          events.at(-3).seq
        ]
        for (const seq of seqs) {
          const linked = await context.newPage()
          await linked.goto(`${pathToFileURL(page).href}#seq-${seq}`)
          const target = linked.locator(".row.target")
          await target.waitFor()
          // Let any scroll the navigation does settle before measuring.
          await linked.waitForTimeout(300)
          const header = (await linked.locator("header").boundingBox())!
          const box = (await target.boundingBox())!
          const where = `seq ${seq}: row at ${box.y}-${box.y + box.height}, header to ${header.y + header.height}`
          expect(box.y, where).toBeGreaterThanOrEqual(header.y + header.height)
          expect(box.y + box.height, where).toBeLessThanOrEqual(900)
          // Highlighted: the row the link names matches :target and carries the marked colours.
          const id = (await target.getAttribute("id"))!
          const shown = linked.locator(`[id="${id}"]`)
          const style = await shown.evaluate((el: any) => {
            const computed = (globalThis as any).getComputedStyle(el)
            return { background: computed.backgroundColor as string, outline: computed.outlineStyle as string }
          })
          expect(style, where).toEqual({ background: "rgb(255, 248, 230)", outline: "solid" })
          await linked.close()
        }
        expect(errors).toEqual([])
        expect(leaks).toEqual([])
        await context.close()
      }),
    90_000
  )

  it.live(
    "a session of 100,000 events shows its first rows within the budget, answers a click, then reads the rest",
    () =>
      Effect.promise(async () => {
        const big = repeatSession(events, 100_000) as ReadonlyArray<SessionEvent>
        const file = path.join(dir, "large.html")
        fs.writeFileSync(file, renderHtml(repeatedHeader("large") as unknown as SessionHeader, big))
        const { context, errors, leaks, tab } = await offline()
        const started = performance.now()
        await tab.goto(pathToFileURL(file).href, { waitUntil: "commit" })
        await tab.locator("#rows .row").first().waitFor()
        const shown = performance.now() - started
        // Interactive: collapsing the first turn is answered.
        await tab.locator("[data-toggle=\"t1\"]").click()
        await tab.locator("[data-toggle=\"t1\"].closed").waitFor()
        const answered = performance.now() - started
        await tab.waitForFunction("window.tiller.loaded()", null, { timeout: 60_000, polling: 100 })
        const loaded = performance.now() - started
        const inPage = Number(await tab.evaluate("window.tiller.shownAt"))
        console.log(
          `HTML export, 100,000 events (${(fs.statSync(file).size / 1024 / 1024).toFixed(1)} MiB): first rows ${
            inPage.toFixed(0)
          } ms after ` +
            `navigation (page clock), ${shown.toFixed(0)} ms as seen from outside; a click answered at ${
              answered.toFixed(0)
            } ms; all parts read at ${loaded.toFixed(0)} ms`
        )
        expect(inPage).toBeGreaterThan(0)
        expect(inPage).toBeLessThan(OPEN_BUDGET_MS)
        expect(answered).toBeLessThan(CLICK_BUDGET_MS)
        // Every part is folded in: a deep link to the last turn's end finds its row.
        const lastEnd = big.filter((e) => e.type === "turn/end").at(-1)! as {
          readonly seq: number
          readonly data: { readonly turn: number }
        }
        expect(await tab.locator("#count").textContent()).toMatch(/^\d+ of \d+ rows$/)
        await tab.evaluate(`window.tiller.goTo(${lastEnd.seq})`)
        await expect.poll(() => tab.locator(".row.target").textContent()).toContain(`turn ${lastEnd.data.turn} ended`)
        expect(errors).toEqual([])
        expect(leaks).toEqual([])
        await context.close()
      }),
    90_000
  )
})
