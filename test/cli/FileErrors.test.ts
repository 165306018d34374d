import { SystemError } from "@effect/platform/Error"
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describeFileError } from "../../src/cli/FileErrors.js"

/** The error node:fs throws for `call`, as the built-in tools see it. */
const nodeError = (call: () => unknown): unknown => {
  try {
    call()
  } catch (error) {
    return error
  }
  throw new Error("expected a failure")
}

describe("describeFileError", () => {
  it("a Node.js errno error reads as its kind in words, without the syscall or the path", () => {
    const missing = nodeError(() => fs.openSync("/nonexistent-dir-for-test/file", "r"))
    expect(describeFileError(missing)).toBe("no such file or directory")
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "tiller-errors-")), "plain")
    fs.writeFileSync(file, "")
    const notDir = nodeError(() => fs.openSync(path.join(file, "x"), "r"))
    fs.rmSync(path.dirname(file), { recursive: true })
    expect(describeFileError(notDir)).toBe("a part of the path is not a directory, or it loops")
    const noReader = Object.assign(new Error("ENXIO: no such device or address, open '/tmp/x/sock'"), { code: "ENXIO" })
    expect(describeFileError(noReader)).toBe("no device or reader behind it (a socket, or a device that is not there)")
  })

  it("a platform SystemError of an unlisted reason reads by the errno code of its cause", () => {
    const cause = Object.assign(new Error("ENXIO: no such device or address, open '/tmp/x/sock'"), { code: "ENXIO" })
    const error = new SystemError({
      reason: "Unknown",
      module: "FileSystem",
      method: "open",
      description: cause.message,
      cause
    })
    expect(describeFileError(error)).toBe("no device or reader behind it (a socket, or a device that is not there)")
    expect(describeFileError(new SystemError({ reason: "NotFound", module: "FileSystem", method: "stat" }))).toBe(
      "no such file or directory"
    )
  })

  it("anything else reads as its message", () => {
    expect(describeFileError(new Error("plain"))).toBe("plain")
    expect(describeFileError("text")).toBe("text")
  })
})
