/**
 * The help and the usage errors of the command line, as people read them: `@effect/cli`'s help
 * without the filler lines ("A user-defined piece of text.", "This setting is optional."), without
 * the built-ins tiller does not support (`--wizard`, `--completions`, `--log-level`), with value
 * names instead of types (`--session ID`), `$ tiller chat` usages, the global options under every
 * subcommand, and colour only on a terminal without `NO_COLOR`. A usage error names a close
 * command and exits 2.
 *
 * @since 0.1.0
 */
import type { Console } from "effect"
import { Effect } from "effect"

const ANSI = /\u001b\[[0-9;]*m/g

/**
 * The exit code of a usage error (a command line that does not parse).
 *
 * @since 0.1.0
 * @category constants
 */
export const USAGE_EXIT_CODE = 2

/**
 * Whether output may be coloured: on a terminal, and `NO_COLOR` unset or empty (no-color.org).
 *
 * @since 0.1.0
 * @category predicates
 */
export const useColor = (env: NodeJS.ProcessEnv, isTTY: boolean): boolean => isTTY && (env.NO_COLOR ?? "") === ""

/**
 * Whether `args` (after the program name) ask for help: `-h` or `--help` before any `--`.
 *
 * @since 0.1.0
 * @category predicates
 */
export const asksForHelp = (args: ReadonlyArray<string>): boolean => {
  for (const arg of args) {
    if (arg === "--") return false
    if (arg === "--help" || arg === "-h") return true
  }
  return false
}

/** Built-in options of @effect/cli that tiller does not offer in its help. */
const HIDDEN_OPTIONS = ["--completions", "--log-level", "--wizard"]

/** Lines that describe a type rather than the option. */
const FILLER = new Set([
  "A user-defined piece of text.",
  "This setting is optional.",
  "This option can be set from environment variables.",
  "An integer.",
  "A true or false value.",
  "A user-defined piece of text. This setting is optional."
])

/** Value names for the options whose type @effect/cli prints. */
const VALUE_NAMES: ReadonlyArray<readonly [RegExp, string]> = [
  [/--db text/g, "--db FILE"],
  [/--model text/g, "--model NAME"],
  [/--session text/g, "--session ID"],
  [/--as text/g, "--as ID"],
  [/--at integer/g, "--at SEQ"],
  [/--inject text\.\.\./g, "[--inject TEXT]..."],
  [/--add-dir text\.\.\./g, "[--add-dir DIR]..."],
  [/--allow text\.\.\./g, "[--allow RULE]..."],
  [/--mcp FILE\.\.\./g, "[--mcp FILE]..."],
  [/--permission-mode default \| acceptEdits \| plan \| bypassPermissions/g, "--permission-mode MODE"],
  [/--context-window integer/g, "--context-window TOKENS"],
  [/(--[a-z-]+) text\b/g, "$1 TEXT"],
  [/(--[a-z-]+) integer\b/g, "$1 N"]
]

/** The blocks of a section: each starts at a line without indentation. */
const blocksOf = (lines: ReadonlyArray<string>): Array<Array<string>> => {
  const blocks: Array<Array<string>> = []
  for (const line of lines) {
    if (line !== "" && !line.startsWith(" ")) blocks.push([line])
    else if (blocks.length > 0) blocks[blocks.length - 1]!.push(line)
  }
  return blocks
}

/** The sections of a help text by heading (a line in capitals). */
const sectionsOf = (text: string): Array<{ readonly heading: string | undefined; readonly lines: Array<string> }> => {
  const sections: Array<{ heading: string | undefined; lines: Array<string> }> = [{ heading: undefined, lines: [] }]
  for (const line of text.split("\n")) {
    if (/^[A-Z][A-Z ]+$/.test(line)) sections.push({ heading: line, lines: [] })
    else sections[sections.length - 1]!.lines.push(line)
  }
  return sections
}

/** The option blocks of a help's OPTIONS section, hidden built-ins and filler left out. */
const optionBlocks = (lines: ReadonlyArray<string>): Array<Array<string>> =>
  blocksOf(lines)
    .filter((block) => !HIDDEN_OPTIONS.some((name) => block[0]!.startsWith(name)))
    .map((block) => block.filter((line) => !FILLER.has(line.trim())))

const isBuiltIn = (block: ReadonlyArray<string>) => /^(\(-h, --help\)|--version)/.test(block[0]!)

/**
 * `@effect/cli`'s help text made readable (see the module's description). `top` is the help of
 * the whole program: its options are the global options listed under a subcommand's.
 *
 * @since 0.1.0
 * @category formatting
 */
export const clean = (text: string, top: string, color: boolean): string => {
  const plain = (value: string) => value.replace(ANSI, "")
  const globals = sectionsOf(plain(top)).find((s) => s.heading === "OPTIONS")
  const globalBlocks = globals === undefined ? [] : optionBlocks(globals.lines).filter((block) => !isBuiltIn(block))
  const isSubcommand = !/^\$ tiller\b/m.test(plain(text))
  const out: Array<string> = []
  for (const section of sectionsOf(plain(text))) {
    if (section.heading === undefined) {
      // The title: "tiller" twice (the name, then the name and version) is said once.
      out.push(...section.lines.filter((line, i, all) => !(line === "tiller" && all.includes("tiller 0.1.0"))))
      continue
    }
    out.push(section.heading)
    if (section.heading === "USAGE") {
      out.push(
        ...section.lines.map((line) =>
          line.replace(/^\$ (?!tiller\b)/, "$ tiller ").replace(/^\$ tiller (\[--db.*)$/, "$ tiller $1 COMMAND")
        )
      )
    } else if (section.heading === "OPTIONS") {
      const blocks = optionBlocks(section.lines)
      const own = blocks.filter((block) => !isBuiltIn(block))
      const builtIn = blocks.filter(isBuiltIn)
      out.push("", ...own.flatMap((block) => [...block, ""]))
      if (isSubcommand && globalBlocks.length > 0) {
        out.push("GLOBAL OPTIONS (before or after the command)", "", ...globalBlocks.flatMap((block) => [...block, ""]))
      }
      out.push(...builtIn.flatMap((block) => [...block, ""]))
    } else {
      out.push(...section.lines.filter((line) => !FILLER.has(line.trim())))
    }
  }
  let result = out.join("\n")
  for (const [pattern, name] of VALUE_NAMES) result = result.replace(pattern, name)
  result = result.replace(/\n{3,}/g, "\n\n").trim() + "\n"
  // The command list in two aligned columns again (value names changed the widths).
  const rows = [...result.matchAll(/^ {2}- (.+?) {2,}(\S.*)$/gm)]
  const width = Math.max(0, ...rows.map((m) => m[1]!.length))
  result = result.replace(
    /^ {2}- (.+?) {2,}(\S.*)$/gm,
    (_, usage: string, description: string) => `  - ${usage.padEnd(width)}  ${description}`
  )
  if (color) result = result.replace(/^([A-Z][A-Z ()]+(?:\([^)]*\))?)$/gm, "\u001b[1m$1\u001b[0m")
  return result
}

/**
 * Runs `effect` with `Console.log` collected instead of printed; returns what it printed.
 *
 * @since 0.1.0
 * @category combinators
 */
export const capture = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<string, E, R> =>
  Effect.consoleWith((base) => {
    const printed: Array<string> = []
    const collecting: Console.Console = {
      ...base,
      log: (...args: ReadonlyArray<unknown>) => Effect.sync(() => printed.push(args.map(String).join(" "))),
      unsafe: { ...base.unsafe, log: (...args: ReadonlyArray<unknown>) => printed.push(args.map(String).join(" ")) }
    }
    return Effect.map(Effect.withConsole(effect, collecting), () => printed.join("\n"))
  })

/**
 * Routes `Console.error` through `write`, without colour unless `color` (usage errors).
 *
 * @since 0.1.0
 * @category combinators
 */
export const plainErrors = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  color: boolean,
  write: (text: string) => void
): Effect.Effect<A, E, R> =>
  Effect.consoleWith((base) => {
    const print = (...args: ReadonlyArray<unknown>) => {
      const text = args.map(String).join(" ")
      write(`${color ? text : text.replace(ANSI, "")}\n`)
    }
    const routed: Console.Console = {
      ...base,
      error: (...args: ReadonlyArray<unknown>) => Effect.sync(() => print(...args)),
      unsafe: { ...base.unsafe, error: print }
    }
    return Effect.withConsole(effect, routed)
  })

/** The edit distance of two short words. */
const distance = (a: string, b: string): number => {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i)
  for (let i = 1; i <= a.length; i++) {
    let previous = row[0]!
    row[0] = i
    for (let j = 1; j <= b.length; j++) {
      const current = row[j]!
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, previous + (a[i - 1] === b[j - 1] ? 0 : 1))
      previous = current
    }
  }
  return row[b.length]!
}

/**
 * The commands a help text lists (its COMMANDS section).
 *
 * @since 0.1.0
 * @category getters
 */
export const commandsOf = (top: string): ReadonlyArray<string> =>
  [...top.replace(ANSI, "").matchAll(/^ {2}- ([a-z][a-z-]*)/gm)].map((m) => m[1]!)

/**
 * The command closest to `word` (a typo of it), if any is close enough.
 *
 * @since 0.1.0
 * @category getters
 */
export const closest = (word: string, commands: ReadonlyArray<string>): string | undefined => {
  let best: { readonly name: string; readonly d: number } | undefined
  for (const name of commands) {
    const d = name.startsWith(word) && word.length >= 2 ? 0 : distance(word, name)
    if (best === undefined || d < best.d) best = { name, d }
  }
  return best !== undefined && best.d <= Math.max(1, Math.floor(best.name.length / 3)) ? best.name : undefined
}
