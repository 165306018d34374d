/**
 * What a session store does: the operations behind the `SessionStore` service, named here so that the
 * machinery that persists a session can take a store without reaching up to the service.
 *
 * The `durability/` room: how a log reaches a store and comes back, below any session's state. The
 * store's shape (this module), its leases (`Lease`, `LocalLease`, `ProcessLease`, `SqliteLease`,
 * `PgLease`), the writer's signal and durable waiters (`WriterSignal`, `SyncAppend`,
 * `DurableWaiters`, `Checkpointer`), decoding stored rows (`DecodedEvents`, `StoredHeader`), the seq
 * rules every store applies (`Contiguity`), the in-memory store (`MemoryStore`), the SQL store with
 * its dialects and schema (`SqlStore`, `SqlDialect`, `SqlSchema`) and the SQLite file's own
 * machinery (`SqliteOpen`, `SqliteDirect`, `SqliteRows`, `SqliteSchema`).
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import type {
  MalformedLog,
  PersistenceError,
  SessionExists,
  SessionNotFound,
  UnsupportedLogVersion
} from "../../domain/Errors.js"
import type { ApprovalAnswerData, SessionEvent, SessionHeader } from "../../domain/Event.js"
import type { SessionId } from "../../domain/Ids.js"
import type { LocalLease } from "./LocalLease.js"
import type { ProcessLease } from "./ProcessLease.js"
import type { SyncAppend } from "./SyncAppend.js"

/**
 * The operations of a session store (SPEC 6.1, 8.10); every backend implements them.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoreShape {
  /** Stores a new session atomically; `SessionExists` if the id is stored. */
  readonly create: (
    header: SessionHeader,
    events: ReadonlyArray<SessionEvent>
  ) => Effect.Effect<void, SessionExists | PersistenceError>
  /** The header and every logical event of a session. */
  readonly load: (id: SessionId) => Effect.Effect<
    { readonly header: SessionHeader; readonly events: ReadonlyArray<SessionEvent> },
    SessionNotFound | MalformedLog | UnsupportedLogVersion | PersistenceError
  >
  /** Appends atomically; fails unless `events[0].seq` is the stored length and seqs are contiguous. */
  readonly append: (
    id: SessionId,
    events: readonly [SessionEvent, ...Array<SessionEvent>]
  ) => Effect.Effect<void, PersistenceError>
  /** Whether a session is stored under `id`. */
  readonly exists: (id: SessionId) => Effect.Effect<boolean, PersistenceError>
  /** The headers of every stored session, in creation order. */
  readonly list: Effect.Effect<ReadonlyArray<SessionHeader>, PersistenceError>
  /**
   * A store that can also append synchronously (the memory store; the SQLite store on a file)
   * offers it here: a session that needs durability while no append is in flight writes through it
   * at once instead of waking its writer fiber and waiting (see `SyncAppend`). A wrapper that
   * changes `append` leaves it out, so that every write goes through its `append`.
   */
  readonly appendNow?: SyncAppend
  /**
   * The store's lease within the process: at most one live agent per session id on this store
   * (SPEC 6.1). Built by `makeLocalLease`; a store without one leaves that exclusion to its callers.
   */
  readonly localLease?: LocalLease
  /** A store whose data other processes may open (a SQLite file) offers its lease across processes here. */
  readonly processLease?: ProcessLease
  /**
   * Answers to approval requests left by a process that does not hold the session (`tiller
   * approve`), taken by the one that does; the memory and SQLite stores offer it.
   */
  readonly approvalMailbox?: ApprovalMailbox
}

/**
 * A per-session mailbox of approval answers: another process posts, the session's owner takes
 * (each answer once) and records it in the log.
 *
 * @since 0.1.0
 * @category models
 */
export interface ApprovalMailbox {
  /** Leaves an answer for the owner of the session (a later answer for the same call replaces it). */
  readonly post: (id: SessionId, answer: ApprovalAnswerData) => Effect.Effect<void, PersistenceError>
  /** Takes every answer left for the session, oldest first. */
  readonly take: (id: SessionId) => Effect.Effect<ReadonlyArray<ApprovalAnswerData>, PersistenceError>
}
