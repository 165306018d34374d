#!/usr/bin/env node
// The tiller executable. It runs src/cli/main.ts bundled by esbuild into one file under
// node_modules/.cache/tiller-cli/, rebuilt when anything under src/ (or the lockfile) is newer than
// the bundle. Loading one bundled file starts the CLI in about a tenth of the time that loading
// the TypeScript sources module by module through tsx takes.
import { mkdirSync, readdirSync, renameSync, statSync, utimesSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const bundle = join(root, "node_modules", ".cache", "tiller-cli", "main.mjs")

const mtimeOf = (path) => {
  try {
    return statSync(path).mtimeMs
  } catch {
    return -1
  }
}

// Directories count too: deleting or renaming a file changes its directory's mtime.
const newestUnder = (directory) => {
  let newest = mtimeOf(directory)
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name)
    newest = Math.max(newest, entry.isDirectory() ? newestUnder(path) : mtimeOf(path))
  }
  return newest
}

const sourcesTime = Math.max(
  newestUnder(join(root, "src")),
  mtimeOf(join(root, "package-lock.json")),
  mtimeOf(fileURLToPath(import.meta.url))
)

// The stamp below keeps whole milliseconds only; a newer source is at least a millisecond newer.
if (mtimeOf(bundle) + 1 < sourcesTime) {
  const { build } = await import("esbuild")
  mkdirSync(dirname(bundle), { recursive: true })
  // Concurrent first runs each build their own file; the rename makes each replacement atomic.
  const temporary = `${bundle}.${process.pid}.tmp`
  await build({
    entryPoints: [join(root, "src", "cli", "main.ts")],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: ["better-sqlite3"],
    banner: { js: "import { createRequire as tillerCreateRequire } from 'node:module'; const require = tillerCreateRequire(import.meta.url);" },
    outfile: temporary,
    logLevel: "warning"
  })
  // Stamped with the sources' time: a source edited during the build is newer, so it rebuilds next time.
  utimesSync(temporary, new Date(), new Date(sourcesTime))
  renameSync(temporary, bundle)
}

await import(pathToFileURL(bundle).href)
