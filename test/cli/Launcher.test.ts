import { describe, expect, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const repository = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

/** A copy of the launcher beside a two-module `src/cli/main.ts`, with esbuild reachable from it. */
const project = () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-launcher-"))
  fs.mkdirSync(path.join(root, "bin"))
  fs.mkdirSync(path.join(root, "src", "cli"), { recursive: true })
  fs.mkdirSync(path.join(root, "node_modules"))
  fs.copyFileSync(path.join(repository, "bin", "tiller.mjs"), path.join(root, "bin", "tiller.mjs"))
  fs.symlinkSync(path.join(repository, "node_modules", "esbuild"), path.join(root, "node_modules", "esbuild"))
  fs.writeFileSync(path.join(root, "package-lock.json"), "{}")
  fs.writeFileSync(path.join(root, "src", "cli", "main.ts"), `import { word } from "./word.js"\nconsole.log(word)\n`)
  fs.writeFileSync(path.join(root, "src", "cli", "word.ts"), `export const word: string = "one"\n`)
  return root
}

const run = (root: string) =>
  execFileSync(process.execPath, [path.join(root, "bin", "tiller.mjs")], { encoding: "utf8" }).trim()

/** Gives `file` and every directory from it up to `root` a time long past, as a checkout or copy may. */
const backdate = (root: string, file: string) => {
  const past = new Date("2001-01-01T00:00:00Z")
  for (let at = file; at.startsWith(root); at = path.dirname(at)) fs.utimesSync(at, past, past)
}

const bundles = (root: string) =>
  fs.readdirSync(path.join(root, "node_modules", ".cache", "tiller-cli")).filter((name) => name.endsWith(".mjs"))

describe("bin/tiller.mjs, the launcher that bundles the CLI", () => {
  it("runs the sources as they are, even when an edited file's time is older than the bundle", () => {
    const root = project()
    try {
      expect(run(root)).toBe("one")
      const word = path.join(root, "src", "cli", "word.ts")
      fs.writeFileSync(word, `export const word: string = "two"\n`)
      backdate(root, word)
      expect(run(root)).toBe("two")
    } finally {
      fs.rmSync(root, { recursive: true, force: true })
    }
  }, 60_000)

  it("rebuilds for a module moved to another path with its old time, and reuses an unchanged build", () => {
    const root = project()
    try {
      expect(run(root)).toBe("one")
      fs.mkdirSync(path.join(root, "src", "cli", "words"))
      const moved = path.join(root, "src", "cli", "words", "word.ts")
      fs.renameSync(path.join(root, "src", "cli", "word.ts"), moved)
      fs.writeFileSync(moved, `export const word: string = "moved"\n`)
      fs.writeFileSync(
        path.join(root, "src", "cli", "main.ts"),
        `import { word } from "./words/word.js"\nconsole.log(word)\n`
      )
      backdate(root, moved)
      backdate(root, path.join(root, "src", "cli", "main.ts"))
      expect(run(root)).toBe("moved")
      const built = bundles(root)
      expect(run(root)).toBe("moved")
      expect(bundles(root)).toEqual(built)
    } finally {
      fs.rmSync(root, { recursive: true, force: true })
    }
  }, 60_000)
})

/** An installed package's layout: the launcher and a packed bundle, no sources, no esbuild. */
const installed = (bundle: string) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "tiller-installed-"))
  fs.mkdirSync(path.join(root, "bin"))
  fs.mkdirSync(path.join(root, "dist", "cli"), { recursive: true })
  fs.copyFileSync(path.join(repository, "bin", "tiller.mjs"), path.join(root, "bin", "tiller.mjs"))
  fs.copyFileSync(path.join(repository, "package.json"), path.join(root, "package.json"))
  fs.writeFileSync(path.join(root, "dist", "cli", "tiller.mjs"), bundle)
  return root
}

describe("bin/tiller.mjs in an installed package", () => {
  it("runs the packed bundle and writes nothing", () => {
    const root = installed(`console.log("packed " + process.argv.slice(2).join(" "))\n`)
    try {
      const before = fs.readdirSync(root, { recursive: true })
      expect(
        execFileSync(process.execPath, [path.join(root, "bin", "tiller.mjs"), "run", "hello"], { encoding: "utf8" })
          .trim()
      )
        .toBe("packed run hello")
      expect(fs.readdirSync(root, { recursive: true })).toEqual(before)
    } finally {
      fs.rmSync(root, { recursive: true, force: true })
    }
  }, 60_000)

  it("says which SQLite packages to install when one is missing, exit code 1", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(repository, "package.json"), "utf8")) as {
      readonly peerDependencies: Readonly<Record<string, string>>
    }
    const root = installed(`import Database from "better-sqlite3"\nconsole.log(Database)\n`)
    try {
      const run = () =>
        execFileSync(process.execPath, [path.join(root, "bin", "tiller.mjs")], { encoding: "utf8", stdio: "pipe" })
      expect(run).toThrow()
      try {
        run()
      } catch (error) {
        const { status, stderr } = error as { readonly status: number; readonly stderr: string }
        expect(status).toBe(1)
        expect(stderr).toBe(
          "tiller: the command line stores sessions in SQLite, which needs the optional peer dependencies " +
            "@effect/sql-sqlite-node, @effect/sql, better-sqlite3; better-sqlite3 is not installed: npm install " +
            `@effect/sql-sqlite-node@${pkg.peerDependencies["@effect/sql-sqlite-node"]} @effect/sql@${
              pkg.peerDependencies["@effect/sql"]
            } ` +
            `better-sqlite3@${pkg.peerDependencies["better-sqlite3"]}\n`
        )
      }
    } finally {
      fs.rmSync(root, { recursive: true, force: true })
    }
  }, 60_000)
})
