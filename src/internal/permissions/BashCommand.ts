/**
 * A shell command split into the simple commands it runs, for matching Bash permission rules: the
 * parts between `&&`, `||`, `;`, `|`, `&` and newlines outside quotes. A command with command or
 * process substitution (`$(...)`, backticks, `<(...)`) or an unclosed quote cannot be vouched for
 * part by part: it splits to `undefined`, unless `lenient` (for deny rules, which look for any
 * matching part) takes the substitutions' insides as parts too.
 *
 * @since 0.1.0
 */

/**
 * The simple commands of `command`, trimmed, empty ones left out.
 *
 * @since 0.1.0
 * @category parsing
 */
export const splitCommand = (
  command: string,
  options: { readonly lenient?: boolean } = {}
): ReadonlyArray<string> | undefined => {
  const parts: Array<string> = []
  let current = ""
  let quote: "'" | "\"" | undefined
  const cut = () => {
    if (current.trim() !== "") parts.push(current.trim())
    current = ""
  }
  for (let i = 0; i < command.length; i++) {
    const c = command[i]!
    const next = command[i + 1]
    if (quote === "'") {
      if (c === "'") quote = undefined
      current += c
      continue
    }
    if (c === "\\" && next !== undefined) {
      current += c + next
      i++
      continue
    }
    const substitution = (c === "$" && next === "(") || c === "`" ||
      ((c === "<" || c === ">") && next === "(" && quote === undefined)
    if (substitution) {
      if (options.lenient !== true) return undefined
      cut()
      if (c !== "`") i++
      continue
    }
    if (quote === "\"") {
      if (c === "\"") quote = undefined
      current += c
      continue
    }
    if (c === "'" || c === "\"") {
      quote = c
      current += c
      continue
    }
    if (options.lenient === true && (c === "(" || c === ")" || c === "{" || c === "}")) {
      cut()
      continue
    }
    if (c === ";" || c === "\n") {
      cut()
      continue
    }
    if (c === "|") {
      cut()
      if (next === "|" || next === "&") i++
      continue
    }
    if (c === "&") {
      // `2>&1`, `>&2` and `&>` are redirections, not separators.
      if (command[i - 1] === ">" || next === ">") {
        current += c
        continue
      }
      cut()
      if (next === "&") i++
      continue
    }
    current += c
  }
  if (quote !== undefined && options.lenient !== true) return undefined
  cut()
  return parts
}
