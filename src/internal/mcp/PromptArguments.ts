/**
 * The arguments of a prompt command (`/mcp__server__prompt ARGS`): `name=value` words for named
 * arguments, other words (quoted with `"` or `'` to hold spaces) fill the remaining arguments in
 * order, the last one taking the rest.
 *
 * @since 0.1.0
 */
import { Either } from "effect"

/** The words of `text`, quotes removed. */
const wordsOf = (text: string): ReadonlyArray<string> =>
  [...text.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3] ?? "")

/**
 * The arguments `text` gives a prompt declaring `declared`; `Left` names a missing required one.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parsePromptArguments = (
  text: string,
  declared: ReadonlyArray<{ readonly name: string; readonly required: boolean }>
): Either.Either<Record<string, string>, string> => {
  const out: Record<string, string> = {}
  const positional: Array<string> = []
  const names = new Set(declared.map((d) => d.name))
  for (const word of wordsOf(text)) {
    const eq = word.indexOf("=")
    if (eq > 0 && names.has(word.slice(0, eq))) out[word.slice(0, eq)] = word.slice(eq + 1)
    else positional.push(word)
  }
  const open = declared.filter((d) => out[d.name] === undefined)
  open.forEach((d, i) => {
    if (i >= positional.length) return
    out[d.name] = i === open.length - 1 ? positional.slice(i).join(" ") : positional[i]!
  })
  if (open.length === 0 && positional.length > 0) {
    return Either.left(`unexpected words: ${positional.join(" ")}`)
  }
  const missing = declared.filter((d) => d.required && out[d.name] === undefined).map((d) => d.name)
  return missing.length === 0 ? Either.right(out) : Either.left(`missing argument ${missing.join(", ")}`)
}
