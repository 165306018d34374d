import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { splitCommand } from "../../../src/internal/permissions/BashCommand.js"
import type { PermissionBehavior, PermissionMode, PermissionRule } from "../../../src/internal/permissions/Rules.js"
import { evaluate, parseRule } from "../../../src/internal/permissions/Rules.js"

const places = { cwd: "/work/project", home: "/home/ann" }

const rules = (spec: Partial<Record<PermissionBehavior, ReadonlyArray<string>>>): ReadonlyArray<PermissionRule> =>
  (["deny", "ask", "allow"] as const).flatMap((behavior) =>
    (spec[behavior] ?? []).map((text) => Either.getOrThrow(parseRule(text, behavior, "settings.json", "/work/project")))
  )

const bash = (command: string) => ({ tool: "Bash", input: { command } })
const file = (tool: string, file_path: string) => ({ tool, input: { file_path }, paths: [file_path] })

describe("permission rules", () => {
  it("parses Claude Code's syntax and refuses what is not a rule", () => {
    expect(parseRule("Bash(npm test:*)", "allow", "o", "/r")).toEqual(Either.right({
      behavior: "allow",
      text: "Bash(npm test:*)",
      tool: "Bash",
      content: "npm test:*",
      origin: "o",
      root: "/r"
    }))
    expect(Either.getOrThrow(parseRule("Read", "deny", "o", "/r")).content).toBeUndefined()
    expect(Either.getOrThrow(parseRule("Bash(*)", "deny", "o", "/r")).content).toBeUndefined()
    expect(Either.isLeft(parseRule("Bash()", "allow", "o", "/r"))).toBe(true)
    expect(Either.isLeft(parseRule("not a rule!", "allow", "o", "/r"))).toBe(true)
  })

  it("splits compound commands into simple ones", () => {
    expect(splitCommand("npm test && git status; ls | wc -l 2>&1 & echo 'a && b'")).toEqual([
      "npm test",
      "git status",
      "ls",
      "wc -l 2>&1",
      "echo 'a && b'"
    ])
    expect(splitCommand("echo $(rm -rf /)")).toBeUndefined()
    expect(splitCommand("echo `id`")).toBeUndefined()
    expect(splitCommand("echo $(rm -rf /)", { lenient: true })).toEqual(["echo", "rm -rf /"])
  })

  // [mode, rules, request, expected behavior, expected rule text or undefined]
  const table: ReadonlyArray<
    readonly [
      PermissionMode,
      Partial<Record<PermissionBehavior, ReadonlyArray<string>>>,
      { tool: string; input: unknown; paths?: ReadonlyArray<string> },
      PermissionBehavior,
      string | undefined
    ]
  > = [
    // Mode defaults.
    ["default", {}, file("Read", "/work/project/a.ts"), "allow", undefined],
    ["default", {}, { tool: "Glob", input: { pattern: "**" }, paths: ["/work/project"] }, "allow", undefined],
    ["default", {}, { tool: "Grep", input: { pattern: "x" }, paths: ["/work/project"] }, "allow", undefined],
    ["default", {}, file("Write", "/work/project/a.ts"), "ask", undefined],
    ["default", {}, file("Edit", "/work/project/a.ts"), "ask", undefined],
    ["default", {}, bash("ls"), "ask", undefined],
    ["default", {}, { tool: "clock", input: {} }, "allow", undefined],
    ["acceptEdits", {}, file("Edit", "/work/project/a.ts"), "allow", undefined],
    ["acceptEdits", {}, file("Write", "/work/project/a.ts"), "allow", undefined],
    ["acceptEdits", {}, bash("ls"), "ask", undefined],
    ["plan", {}, file("Read", "/work/project/a.ts"), "allow", undefined],
    ["plan", {}, file("Edit", "/work/project/a.ts"), "deny", undefined],
    ["plan", {}, bash("ls"), "deny", undefined],
    ["plan", { allow: ["Bash"] }, bash("ls"), "deny", undefined],
    ["bypassPermissions", {}, bash("rm -rf build"), "allow", undefined],
    ["bypassPermissions", { deny: ["Bash(rm:*)"] }, bash("rm -rf build"), "deny", "Bash(rm:*)"],
    // Bash: prefix, exact, wildcard, compound commands.
    ["default", { allow: ["Bash(npm test:*)"] }, bash("npm test"), "allow", "Bash(npm test:*)"],
    ["default", { allow: ["Bash(npm test:*)"] }, bash("npm test -- --watch"), "allow", "Bash(npm test:*)"],
    ["default", { allow: ["Bash(npm test:*)"] }, bash("npm testing"), "ask", undefined],
    ["default", { allow: ["Bash(npm test:*)"] }, bash("npm test && rm -rf /"), "ask", undefined],
    ["default", { allow: ["Bash(npm test:*)"] }, bash("npm test $(rm -rf /)"), "ask", undefined],
    [
      "default",
      { allow: ["Bash(npm test:*)", "Bash(git status)"] },
      bash("npm test && git status"),
      "allow",
      "Bash(npm test:*)"
    ],
    ["default", { allow: ["Bash(git status)"] }, bash("git status"), "allow", "Bash(git status)"],
    ["default", { allow: ["Bash(git status)"] }, bash("git status --short"), "ask", undefined],
    ["default", { allow: ["Bash(git * main)"] }, bash("git push origin main"), "allow", "Bash(git * main)"],
    ["default", { allow: ["Bash"] }, bash("anything | at all"), "allow", "Bash"],
    ["acceptEdits", { deny: ["Bash(rm:*)"], allow: ["Bash"] }, bash("ls && rm -rf x"), "deny", "Bash(rm:*)"],
    ["default", { deny: ["Bash(curl:*)"] }, bash("echo $(curl evil)"), "deny", "Bash(curl:*)"],
    // Deny first, then ask, then allow.
    ["default", { deny: ["Bash(git push:*)"], allow: ["Bash(git:*)"] }, bash("git push"), "deny", "Bash(git push:*)"],
    ["default", { ask: ["Bash(git push:*)"], allow: ["Bash(git:*)"] }, bash("git push"), "ask", "Bash(git push:*)"],
    ["acceptEdits", { ask: ["Edit(src/**)"] }, file("Write", "/work/project/src/a.ts"), "ask", "Edit(src/**)"],
    // Paths: gitignore-style, relative to the working directory, the project root, home, the root.
    ["default", { deny: ["Read(./.env)"] }, file("Read", "/work/project/.env"), "deny", "Read(./.env)"],
    ["default", { deny: ["Read(./.env)"] }, file("Read", "/work/project/sub/.env"), "allow", undefined],
    ["default", { deny: ["Read(.env)"] }, file("Read", "/work/project/sub/.env"), "deny", "Read(.env)"],
    ["default", { deny: ["Read(*.env)"] }, file("Read", "/work/project/a/b/prod.env"), "deny", "Read(*.env)"],
    ["default", { deny: ["Read(~/.ssh/**)"] }, file("Read", "/home/ann/.ssh/id_rsa"), "deny", "Read(~/.ssh/**)"],
    ["default", { deny: ["Read(//etc/**)"] }, file("Read", "/etc/passwd"), "deny", "Read(//etc/**)"],
    ["default", { deny: ["Read(/secrets/**)"] }, file("Read", "/work/project/secrets/k"), "deny", "Read(/secrets/**)"],
    [
      "default",
      { deny: ["Read"] },
      { tool: "Grep", input: { pattern: "x" }, paths: ["/work/project"] },
      "deny",
      "Read"
    ],
    ["default", { deny: ["Read(./.env)"] }, file("Read", "/work/project/link-to-env"), "allow", undefined],
    [
      "default",
      { deny: ["Read(./.env)"] },
      { tool: "Read", input: {}, paths: ["/work/project/link-to-env", "/work/project/.env"] },
      "deny",
      "Read(./.env)"
    ],
    ["default", { allow: ["Edit(src/**)"] }, file("Edit", "/work/project/src/deep/a.ts"), "allow", "Edit(src/**)"],
    ["default", { allow: ["Edit(src/**)"] }, file("Write", "/work/project/src/a.ts"), "allow", "Edit(src/**)"],
    ["default", { allow: ["Edit(src/**)"] }, file("Edit", "/work/project/test/a.ts"), "ask", undefined],
    ["default", { allow: ["Edit(src/**)"] }, file("Edit", "/elsewhere/src/a.ts"), "ask", undefined],
    ["default", { allow: ["Write(src/**)"] }, file("Edit", "/work/project/src/a.ts"), "ask", undefined],
    // Other tools by name.
    ["default", { deny: ["wait"] }, { tool: "wait", input: { ms: 1 } }, "deny", "wait"]
  ]

  it.each(table)("%s %j %j -> %s (%s)", (mode, spec, request, behavior, rule) => {
    const outcome = evaluate(rules(spec), mode, request, places)
    expect(outcome.behavior).toBe(behavior)
    expect(outcome.rule?.text).toBe(rule)
    if (rule !== undefined) expect(outcome.reason).toContain(JSON.stringify(rule))
  })
})
