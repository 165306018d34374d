/**
 * Every TypeScript block of README.md compiles: each ```ts block is type-checked as a module of its
 * own, with the project's compiler options and `tiller` resolving to src/index.ts, so an example
 * that uses a name tiller does not export, or uses one wrongly, fails here.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import ts from "typescript"

const ROOT = path.resolve(import.meta.dirname, "..")

/** The ```ts blocks of `markdown`, each with the line its code starts on. */
export const typeScriptBlocks = (markdown: string): ReadonlyArray<{ readonly line: number; readonly code: string }> => {
  const blocks: Array<{ line: number; code: string }> = []
  const lines = markdown.split("\n")
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i]!)) continue
    const start = i + 1
    let end = start
    while (end < lines.length && !lines[end]!.startsWith("```")) end++
    blocks.push({ line: start + 1, code: lines.slice(start, end).join("\n") })
    i = end
  }
  return blocks
}

/** The project's compiler options, with `tiller` mapped to the sources. */
const compilerOptions = (): ts.CompilerOptions => {
  const configFile = path.join(ROOT, "tsconfig.json")
  const { config } = ts.readConfigFile(configFile, ts.sys.readFile)
  const { options } = ts.parseJsonConfigFileContent(config, ts.sys, ROOT, undefined, configFile)
  return {
    ...options,
    noEmit: true,
    // A README block shows a piece of an app: a name it defines need not be used in it.
    noUnusedLocals: false,
    paths: {
      tiller: [path.join(ROOT, "src", "index.ts")],
      "tiller/cluster": [path.join(ROOT, "src", "cluster.ts")]
    }
  }
}

interface Block {
  /** Where the block is: README.md, or another name for a block of this test. */
  readonly file: string
  readonly line: number
  readonly code: string
}

/** The diagnostics of each block, each compiled as a module beside package.json (an ES module there), in one program. */
const check = (blocks: ReadonlyArray<Block>): Array<string> => {
  const files = new Map(blocks.map((block) => [path.join(ROOT, `${block.file}.line-${block.line}.ts`), block] as const))
  const options = compilerOptions()
  const host = ts.createCompilerHost(options)
  const { fileExists, getSourceFile, readFile } = host
  host.fileExists = (file) => files.has(file) || fileExists.call(host, file)
  host.readFile = (file) => files.get(file)?.code ?? readFile.call(host, file)
  host.getSourceFile = (file, language, ...rest) => {
    const block = files.get(file)
    return block === undefined
      ? getSourceFile.call(host, file, language, ...rest)
      : ts.createSourceFile(file, block.code, language, true)
  }
  const program = ts.createProgram([...files.keys()], options, host)
  const messages: Array<string> = program.getOptionsDiagnostics().map((d) =>
    ts.flattenDiagnosticMessageText(d.messageText, "\n")
  )
  for (const [file, block] of files) {
    const source = program.getSourceFile(file)!
    for (const diagnostic of [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)]) {
      const { line } = source.getLineAndCharacterOfPosition(diagnostic.start ?? 0)
      messages.push(
        `${block.file}:${block.line + line}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n")}`
      )
    }
  }
  return messages
}

// Two blocks that must fail, checked in the same program as README's (one program: the sources are
// read and bound once).
const BROKEN: ReadonlyArray<Block> = [
  { file: "broken", line: 1, code: `import { Agent } from "tiller"\nconst x: string = Agent` },
  { file: "broken", line: 10, code: `import { NoSuchName } from "tiller"` }
]

let checked: ReadonlyArray<string> | undefined
const diagnostics = () => {
  checked ??= check([
    ...typeScriptBlocks(fs.readFileSync(path.join(ROOT, "README.md"), "utf8")).map((block) => ({
      file: "README.md",
      ...block
    })),
    ...BROKEN
  ])
  return checked
}

describe("README", () => {
  it("finds the TypeScript blocks, each with the line its code starts on", () => {
    expect(typeScriptBlocks("a\n```ts\nconst x = 1\n```\n```bash\nls\n```\n```ts\nlet y\n```\n")).toEqual([
      { line: 3, code: "const x = 1" },
      { line: 9, code: "let y" }
    ])
    expect(typeScriptBlocks(fs.readFileSync(path.join(ROOT, "README.md"), "utf8")).length).toBeGreaterThanOrEqual(3)
  })

  it("reports an example that does not compile, at its line", () => {
    const broken = diagnostics().filter((message) => message.startsWith("broken:"))
    expect(broken).toHaveLength(2)
    expect(broken[0]).toMatch(/^broken:2: Type .* is not assignable to type 'string'/)
    expect(broken[1]).toMatch(/^broken:10: Module '"tiller"' has no exported member 'NoSuchName'/)
  }, 180_000)

  it("every TypeScript block of README.md compiles against the sources", () => {
    expect(diagnostics().filter((message) => !message.startsWith("broken:"))).toEqual([])
  }, 180_000)
})
