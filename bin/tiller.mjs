#!/usr/bin/env node
// The tiller executable.
//
// In an installed package it runs dist/cli/tiller.mjs, the bundle `npm pack` built (scripts/build-cli.mjs):
// nothing is built or written at run time, and the bundle imports effect and the other peer
// dependencies from the application's node_modules. The command line stores sessions in SQLite, whose
// packages are optional peers of tiller: when one is missing, it says what to install.
//
// In a clone (src/cli/main.ts is there) it runs src/cli/main.ts bundled by esbuild into one file under
// node_modules/.cache/tiller-cli/, named for a hash of everything the bundle is built from (every
// file under src/, the lockfile and this launcher): a changed, added, removed or renamed source
// names another bundle, which is built once; times on files play no part. Loading one bundled file
// starts the CLI in about a tenth of the time that loading the TypeScript sources module by module
// through tsx takes.
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")

// The SQLite store's optional peers (package.json `peerDependencies`), in the order of the install line.
const SQLITE_PEERS = ["@effect/sql-sqlite-node", "@effect/sql", "better-sqlite3"]

/** Runs `bundle`; a missing SQLite peer is said with the install line that brings it, exit code 1. */
const run = async (bundle) => {
  try {
    await import(pathToFileURL(bundle).href)
  } catch (error) {
    const named = /Cannot find (?:package|module) '([^']+)'/.exec(String(error?.message))?.[1]
    const missing = SQLITE_PEERS.find((name) => named === name || named?.startsWith(`${name}/`))
    if (missing === undefined) throw error
    const { peerDependencies } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
    const install = SQLITE_PEERS.map((name) => `${name}@${peerDependencies[name]}`).join(" ")
    process.stderr.write(
      `tiller: the command line stores sessions in SQLite, which needs the optional peer dependencies ${
        SQLITE_PEERS.join(", ")
      }; ` +
        `${missing} is not installed: npm install ${install}\n`
    )
    process.exit(1)
  }
}

if (existsSync(join(root, "src", "cli", "main.ts"))) await run(await bundleOfSources())
else await run(join(root, "dist", "cli", "tiller.mjs"))

/** The clone's bundle of src/cli/main.ts: built into the cache when its sources changed. */
async function bundleOfSources() {
  const cache = join(root, "node_modules", ".cache", "tiller-cli")
  const filesUnder = (directory) =>
    readdirSync(directory, { withFileTypes: true })
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .flatMap((entry) => {
        const path = join(directory, entry.name)
        return entry.isDirectory() ? filesUnder(path) : [path]
      })

  const hash = createHash("sha256")
  for (
    const file of [...filesUnder(join(root, "src")), join(root, "package-lock.json"), fileURLToPath(import.meta.url)]
  ) {
    hash.update(relative(root, file)).update("\0")
    try {
      hash.update(readFileSync(file))
    } catch {
      hash.update("(absent)")
    }
    hash.update("\0")
  }
  const name = `main-${hash.digest("hex").slice(0, 16)}.mjs`
  const bundle = join(cache, name)

  if (!existsSync(bundle)) {
    const { build } = await import("esbuild")
    mkdirSync(cache, { recursive: true })
    // Concurrent first runs each build their own file; the rename makes each replacement atomic.
    const temporary = `${bundle}.${process.pid}.tmp`
    await build({
      entryPoints: [join(root, "src", "cli", "main.ts")],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      external: ["better-sqlite3"],
      banner: {
        js:
          "import { createRequire as tillerCreateRequire } from 'node:module'; const require = tillerCreateRequire(import.meta.url);"
      },
      outfile: temporary,
      logLevel: "warning"
    })
    renameSync(temporary, bundle)
    // Bundles of earlier sources are left over; those built more than a minute ago go (a run that
    // found or built one imports it at once, so none is still about to be loaded).
    for (const entry of readdirSync(cache)) {
      const path = join(cache, entry)
      if (entry === name || !/^main(-[0-9a-f]+)?\.mjs$/.test(entry)) continue
      try {
        if (statSync(path).mtimeMs < Date.now() - 60_000) rmSync(path, { force: true })
      } catch {
        // Removed by another run meanwhile.
      }
    }
  }

  return bundle
}
