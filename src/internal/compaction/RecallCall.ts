/**
 * How the model calls `read_history`, in the words the placeholders, cut notes and recall pages
 * quote (one place, so every text names the same tool and arguments).
 *
 * @since 0.1.0
 */

/**
 * The tool's name.
 *
 * @since 0.1.0
 * @category constants
 */
export const READ_HISTORY = "read_history"

/**
 * A call with the given arguments, as text: `read_history {"from":3,"to":3}`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const recallCall = (args: Readonly<Record<string, unknown>>): string => `${READ_HISTORY} ${JSON.stringify(args)}`

/**
 * The call that reads one seq range.
 *
 * @since 0.1.0
 * @category formatting
 */
export const rangeCall = (from: number, to: number): string => recallCall({ from, to })

/**
 * The call that reads one tool call's full output from `offset`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const toolCallCall = (toolCallId: string, offset: number): string => recallCall({ toolCallId, offset })
