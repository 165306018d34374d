/**
 * The W1 comparison as a small self-contained SVG: one horizontal bar per system, its median
 * steps/s as a ratio to the fastest like-for-like peer's, with reference lines at the target (1x)
 * and the stretch target.
 *
 * @since 0.1.0
 */
import { formatCount } from "../util.js"
import type { W1Compare, W1Outcome } from "./result.js"
import { isLikeForLike, medianStepsPerSec, ratioToFastestPeer, W1_RATIO_STRETCH, W1_RATIO_TARGET } from "./result.js"

const WIDTH = 900
const LABEL_WIDTH = 330
const BAR_WIDTH = 400
const ROW = 26
const TOP = 46
const BOTTOM = 34

const escapeXml = (text: string): string =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

const fixed = (n: number): string => n.toFixed(1)

/**
 * An SVG bar chart of every system's median steps/s over the fastest like-for-like peer's (tiller's
 * bars in a colour of their own, test doubles paler; systems that could not run say so).
 *
 * @since 0.1.0
 * @category reporting
 */
export const w1Svg = (result: W1Compare): string => {
  const outcomes: ReadonlyArray<W1Outcome> = result.outcomes
  const ratios = outcomes.map((o) => o.status === "ran" ? ratioToFastestPeer(result, o) : undefined)
  const scaleMax = Math.max(W1_RATIO_STRETCH * 1.1, ...ratios.map((r) => (r ?? 0) * 1.05))
  const x = (ratio: number) => LABEL_WIDTH + (ratio / scaleMax) * BAR_WIDTH
  const height = TOP + outcomes.length * ROW + BOTTOM
  const plotBottom = TOP + outcomes.length * ROW
  const parts: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" ` +
    `font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="12" y="20" font-size="14" font-weight="600" fill="#111">${
      escapeXml(
        `W1 agent loop: median steps/s relative to the fastest like-for-like peer (N = ${formatCount(result.steps)}` +
          `${result.quick ? ", quick" : ""})`
      )
    }</text>`,
    `<text x="12" y="36" fill="#555">${
      escapeXml(
        `${result.runs} runs per system, one process per run; higher is better; target: tiller's custom Model >= ` +
          `${W1_RATIO_TARGET}x (stretch ${W1_RATIO_STRETCH}x); pale bars are test doubles`
      )
    }</text>`
  ]
  outcomes.forEach((o, i) => {
    const y = TOP + i * ROW
    const mid = y + ROW / 2 + 4
    parts.push(
      `<text x="${LABEL_WIDTH - 8}" y="${mid}" text-anchor="end" fill="#111">${escapeXml(o.system.label)}</text>`
    )
    const ratio = ratios[i]
    if (o.status === "failed" || ratio === undefined) {
      parts.push(`<text x="${LABEL_WIDTH + 4}" y="${mid}" fill="#a33">could not run</text>`)
      return
    }
    const likeForLike = isLikeForLike(o.system)
    const fill = o.system.tiller ? (likeForLike ? "#2b6cb0" : "#a3bfe0") : (likeForLike ? "#7b8794" : "#cbd2d9")
    parts.push(
      `<rect x="${LABEL_WIDTH}" y="${y + 5}" width="${fixed(Math.max(1, x(ratio) - LABEL_WIDTH))}" height="${
        ROW - 10
      }" fill="${fill}"/>`,
      `<text x="${fixed(x(ratio) + 6)}" y="${mid}" fill="#111">${
        escapeXml(`${ratio.toFixed(2)}x (${formatCount(medianStepsPerSec(o))} steps/s)`)
      }</text>`
    )
  })
  for (
    const [ratio, label, colour] of [[W1_RATIO_TARGET, `target ${W1_RATIO_TARGET}x`, "#555"], [
      W1_RATIO_STRETCH,
      `stretch ${W1_RATIO_STRETCH}x`,
      "#c05621"
    ]] as const
  ) {
    parts.push(
      `<line x1="${fixed(x(ratio))}" y1="${TOP - 2}" x2="${fixed(x(ratio))}" y2="${
        plotBottom + 2
      }" stroke="${colour}" ` +
        `stroke-dasharray="4 3"/>`,
      `<text x="${fixed(x(ratio))}" y="${plotBottom + 16}" text-anchor="middle" fill="${colour}">${
        escapeXml(label)
      }</text>`
    )
  }
  parts.push("</svg>", "")
  return parts.join("\n")
}
