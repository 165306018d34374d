/**
 * File system failures as the CLI prints them (the description lives beside the file tools, which
 * word their refusals the same way).
 *
 * @since 0.1.0
 */
export { describeFileError } from "../internal/tools/FileErrors.js"
