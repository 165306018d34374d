// Bundles the command line (src/cli/main.ts) into dist/cli/tiller.mjs for the published package
// (`npm pack` runs it through `prepack`); bin/tiller.mjs runs that file in an installed package.
// The peer dependencies stay imports, resolved from the application's node_modules, so the command
// line shares the application's copy of effect and its @effect/* packages; the packages only the
// command line uses (@effect/cli, @effect/platform-node, the printers, @effect/opentelemetry's
// OTLP exporter) are bundled, so an application installs none of them.
import { build } from "esbuild"
import { readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
// OTLP export's peer is bundled: the command line sends traces without the application installing it.
const bundledPeers = new Set(["@effect/opentelemetry"])
const external = Object.keys(pkg.peerDependencies)
  .filter((name) => !bundledPeers.has(name))
  .flatMap((name) => [name, `${name}/*`])

const outfile = join(root, "dist", "cli", "tiller.mjs")
await build({
  entryPoints: [join(root, "src", "cli", "main.ts")],
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  external,
  // Bundled CommonJS packages (undici, ws) call require for Node's own modules.
  banner: {
    js:
      "import { createRequire as tillerCreateRequire } from 'node:module'; const require = tillerCreateRequire(import.meta.url);"
  },
  outfile,
  logLevel: "warning"
})
console.log(`built ${outfile.slice(root.length + 1)}`)
