/**
 * What the crash-test child reports on stdout (one JSON object per line) and the seeded PRNG both
 * sides use.
 */

/** One operation whose Effect completed in the child. */
export type Ack =
  | { readonly op: "followup" | "steer" | "inject"; readonly id: string }
  | { readonly op: "remove"; readonly id: string; readonly removed: boolean }
  | { readonly op: "cancel"; readonly keepInbox: boolean }

/** The child's stdout, split into its `ready` line and its acknowledgements. */
export interface ChildReport {
  readonly ready: boolean
  readonly acks: ReadonlyArray<Ack>
}

/**
 * Parses the child's stdout. Lines are written whole (each is far below the pipe's atomic write
 * size), so only a kill can leave a partial last line; it is dropped, as is everything after it.
 */
export const parseReport = (stdout: string): ChildReport => {
  const lines = stdout.split("\n")
  // The text after the last newline is either empty or a line the kill cut short.
  lines.pop()
  let ready = false
  const acks: Array<Ack> = []
  for (const line of lines) {
    const value = JSON.parse(line) as Ack | { readonly ready: true }
    if ("ready" in value) ready = true
    else acks.push(value)
  }
  return { ready, acks }
}

/** A small seeded PRNG (mulberry32): uniform numbers in [0, 1). */
export const mulberry32 = (seed: number): () => number => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6D2B79F5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
