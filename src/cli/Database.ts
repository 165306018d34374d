/**
 * The `--db` option (or `TILLER_DB`): a SQLite file, or a PostgreSQL server given by a
 * `postgres://` (or `postgresql://`) URL; and how it is named in messages, never with its password.
 *
 * @since 0.1.0
 */
import { redactUrl } from "../layers/PgStore.js"

/**
 * Whether `db` names a PostgreSQL database rather than a SQLite file.
 *
 * @since 0.1.0
 * @category predicates
 */
export const isPostgres = (db: string): boolean => /^postgres(?:ql)?:\/\//i.test(db)

/**
 * `db` as messages show it: a file as given, a URL with its password replaced by `***`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const label = (db: string): string => (isPostgres(db) ? redactUrl(db) : db)
