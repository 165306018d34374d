/**
 * The shape of `src/`: no import cycle between its modules, and dependencies pointing one way
 * between its folders (`domain` <- `internal` <- `services` <- `layers` <- `cli`, see
 * docs/ARCHITECTURE.md). Every import counts, `import type` and re-exports included: a cycle of
 * types is still a cycle for a reader.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import ts from "typescript"

const SRC = path.resolve(import.meta.dirname, "../src")

/** Every `.ts` file under `dir`, as paths relative to `src/` with `/` separators. */
const sourceFiles = (dir: string): ReadonlyArray<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(full)
    return entry.name.endsWith(".ts") ? [path.relative(SRC, full).split(path.sep).join("/")] : []
  })

/** The import graph of `src/`: each module and the `src/` modules it imports (static, dynamic, type-only, re-exports). */
const importGraph = (): ReadonlyMap<string, ReadonlyArray<string>> => {
  const graph = new Map<string, ReadonlyArray<string>>()
  for (const file of sourceFiles(SRC)) {
    const text = fs.readFileSync(path.join(SRC, file), "utf8")
    const { importedFiles } = ts.preProcessFile(text, true, true)
    const targets = importedFiles
      .map((ref) => ref.fileName)
      .filter((name) => name.startsWith("."))
      .map((name) => path.posix.normalize(path.posix.join(path.posix.dirname(file), name)).replace(/\.js$/, ".ts"))
    graph.set(file, [...new Set(targets)])
  }
  return graph
}

/** The strongly connected components of more than one module (or a module importing itself): the cycles. */
const cycles = (graph: ReadonlyMap<string, ReadonlyArray<string>>): ReadonlyArray<ReadonlyArray<string>> => {
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const found: Array<ReadonlyArray<string>> = []
  const visit = (node: string): void => {
    index.set(node, counter)
    low.set(node, counter)
    counter++
    stack.push(node)
    onStack.add(node)
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue
      if (!index.has(next)) {
        visit(next)
        low.set(node, Math.min(low.get(node)!, low.get(next)!))
      } else if (onStack.has(next)) low.set(node, Math.min(low.get(node)!, index.get(next)!))
    }
    if (low.get(node) !== index.get(node)) return
    const component: Array<string> = []
    let member: string
    do {
      member = stack.pop()!
      onStack.delete(member)
      component.push(member)
    } while (member !== node)
    if (component.length > 1 || (graph.get(node) ?? []).includes(node)) found.push(component.sort())
  }
  for (const node of graph.keys()) if (!index.has(node)) visit(node)
  return found
}

/** The top-level folder of a module (`domain`, `internal`, `services`, `layers`, `cli`), or `""` for `index.ts`. */
const floor = (file: string): string => (file.includes("/") ? file.slice(0, file.indexOf("/")) : "")

/** For each floor, the floors its modules must not import. */
const FORBIDDEN: Record<string, ReadonlyArray<string>> = {
  domain: ["internal", "services", "layers", "cli", ""],
  internal: ["services", "layers", "cli", ""],
  services: ["layers", "cli", ""],
  layers: ["cli", ""],
  cli: [""]
}

/** Every import that points against the direction of the floors, as `from -> to`. */
const backArrows = (graph: ReadonlyMap<string, ReadonlyArray<string>>): ReadonlyArray<string> =>
  [...graph].flatMap(([from, targets]) =>
    targets
      .filter((to) => (FORBIDDEN[floor(from)] ?? []).includes(floor(to)))
      .map((to) => `${from} -> ${to}`)
  )

/** The room of an internal module (`internal/state`), or the module itself outside `internal/`. */
const room = (file: string): string => {
  const parts = file.split("/")
  return parts[0] === "internal" && parts.length > 2 ? `internal/${parts[1]}` : file
}

/** The graph of `src/internal/`'s rooms: an arrow wherever a module of one imports a module of another. */
const roomGraph = (graph: ReadonlyMap<string, ReadonlyArray<string>>): ReadonlyMap<string, ReadonlyArray<string>> => {
  const rooms = new Map<string, Set<string>>()
  for (const [from, targets] of graph) {
    if (!from.startsWith("internal/")) continue
    const arrows = rooms.get(room(from)) ?? new Set<string>()
    for (const to of targets) if (to.startsWith("internal/") && room(to) !== room(from)) arrows.add(room(to))
    rooms.set(room(from), arrows)
  }
  return new Map([...rooms].map(([name, arrows]) => [name, [...arrows]]))
}

describe("src/ import graph", () => {
  const graph = importGraph()

  it("reads every module and resolves every relative import to a module of src/", () => {
    expect(graph.size).toBeGreaterThan(50)
    const unresolved = [...graph].flatMap(([from, targets]) =>
      targets.filter((to) => !graph.has(to)).map((to) => `${from} -> ${to}`)
    )
    expect(unresolved).toEqual([])
  })

  it("has no import cycle, type-only imports included", () => {
    expect(cycles(graph)).toEqual([])
  })

  it("points one way: domain <- internal <- services <- layers <- cli", () => {
    expect(backArrows(graph)).toEqual([])
  })

  it("the rooms of src/internal/ import each other one way: no two rooms in a cycle", () => {
    const rooms = roomGraph(graph)
    expect(rooms.size).toBeGreaterThan(5)
    expect(cycles(rooms)).toEqual([])
  })

  it("the walk finds a cycle and a back-arrow when there is one", () => {
    const sample = new Map<string, ReadonlyArray<string>>([
      ["domain/A.ts", ["services/B.ts"]],
      ["services/B.ts", ["layers/C.ts", "domain/A.ts"]],
      ["layers/C.ts", []]
    ])
    expect(cycles(sample)).toEqual([["domain/A.ts", "services/B.ts"]])
    expect(backArrows(sample)).toEqual(["domain/A.ts -> services/B.ts", "services/B.ts -> layers/C.ts"])
    const rooms = roomGraph(
      new Map([
        ["internal/state/S.ts", ["internal/durability/W.ts"]],
        ["internal/durability/W.ts", ["internal/durability/X.ts"]],
        ["internal/durability/X.ts", ["internal/state/T.ts"]],
        ["internal/state/T.ts", []]
      ])
    )
    expect(cycles(rooms)).toEqual([["internal/durability", "internal/state"]])
  })
})
