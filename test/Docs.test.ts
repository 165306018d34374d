/**
 * The repository's documents cite files a clone has: every "SPEC n.m" in the sources, tests,
 * benchmarks, examples and documents names a section of docs/SPEC.md, and README and docs/ never
 * send a reader to a folder outside the repository.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = fileURLToPath(new URL("../", import.meta.url))
const SPEC = path.join(ROOT, "docs", "SPEC.md")

const filesUnder = (relative: string, extensions: ReadonlyArray<string>): Array<string> => {
  const out: Array<string> = []
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      if (entry.name === "node_modules") continue
      const full = path.join(dir, entry.name)
      if (entry.isDirectory()) walk(full)
      else if (extensions.some((ext) => entry.name.endsWith(ext))) out.push(full)
    }
  }
  walk(path.join(ROOT, relative))
  return out
}

/** The section numbers of docs/SPEC.md: "6" for "## 6. …", "6.7" for "### 6.7 …". */
const specSections = (text: string): ReadonlySet<string> =>
  new Set(
    text.split("\n").flatMap((line) => {
      const match = /^#{2,3} (\d+(?:\.\d+)?)\.? /.exec(line)
      return match === null ? [] : [match[1]!]
    })
  )

describe("docs/SPEC.md", () => {
  it("says that source comments cite its sections as SPEC n.m", () => {
    expect(fs.readFileSync(SPEC, "utf8").replace(/\s+/g, " ")).toContain(
      "Source comments cite sections of this file as **SPEC n.m**"
    )
  })

  it("has a section for every SPEC citation in the sources, tests, benchmarks, examples and documents", () => {
    const sections = specSections(fs.readFileSync(SPEC, "utf8"))
    const files = [
      ...["src", "test", "bench", "examples", "scripts"].flatMap((dir) => filesUnder(dir, [".ts", ".mjs"])),
      ...filesUnder("docs", [".md"]),
      path.join(ROOT, "README.md")
    ]
    const unresolved: Array<string> = []
    let citations = 0
    for (const file of files) {
      for (const match of fs.readFileSync(file, "utf8").matchAll(/\bSPEC (\d+(?:\.\d+)?)/g)) {
        citations++
        if (!sections.has(match[1]!)) unresolved.push(`${path.relative(ROOT, file)}: SPEC ${match[1]}`)
      }
    }
    expect(citations).toBeGreaterThan(100)
    expect(unresolved).toEqual([])
  })

  it("keeps the numbering of every top-level section, 0 to 9", () => {
    const sections = specSections(fs.readFileSync(SPEC, "utf8"))
    expect(["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"].filter((n) => !sections.has(n))).toEqual([])
  })
})

describe("README and docs/", () => {
  it("point at no file outside the repository", () => {
    const documents = [path.join(ROOT, "README.md"), ...filesUnder("docs", [".md"])]
    const outside = documents.flatMap((file) =>
      fs.readFileSync(file, "utf8").split("\n").flatMap((line, n) =>
        /\.\.\/shared\b|shared design folder/.test(line)
          ? [`${path.relative(ROOT, file)}:${n + 1}: ${line.trim()}`]
          : []
      )
    )
    expect(outside).toEqual([])
  })
})
