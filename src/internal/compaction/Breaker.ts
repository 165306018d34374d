/**
 * The circuit breaker of automatic compaction: it counts consecutive automatic compactions that
 * failed or freed nothing (one that freed tokens but left use above the threshold is no failure).
 * Open, it stops threshold compactions; an overflow still gets its compaction unless the last
 * overflow's compaction failed too, so the breaker stops repeated failing compactions and never the
 * first overflow-triggered one. A success, or a manual compaction, closes it.
 *
 * @since 0.1.0
 */

/**
 * The breaker of one session (mutable; owned by its compaction service).
 *
 * @since 0.1.0
 * @category models
 */
export class Breaker {
  private failures = 0
  private overflowFailed = false

  constructor(private readonly maxFailures: number) {}

  /** Whether threshold compactions are stopped. */
  get open(): boolean {
    return this.failures >= this.maxFailures
  }

  /** Whether an overflow is refused its compaction: open, and the last overflow's compaction failed. */
  get refusesOverflow(): boolean {
    return this.open && this.overflowFailed
  }

  /** Counts a failed compaction (`overflow`: of an overflow, or its retry overflowed again). */
  fail(overflow: boolean): void {
    this.failures += 1
    if (overflow) this.overflowFailed = true
  }

  /** Closes the breaker: a compaction achieved its aim. */
  reset(): void {
    this.failures = 0
    this.overflowFailed = false
  }
}
