import type { PrHead, TaskKey } from '../storage/task/metadata.js'

/** A comment (issue comment, MR note, inbox message) as the agent is told of it. */
export interface Comment {
  author: string
  body: string
  created_at: string
  /** False when the forge says its author has no write access (docs/delivery.md#trust): told to the model, never a trigger. */
  trusted?: boolean
}

/** A comment on the task's issue, PR or MR, as the source reports it. */
export interface RemoteComment extends Comment {
  id: string
}

/** Where the task came from, and where it reports back (docs/contract.md §13.1). */
export interface RemoteTask {
  key: TaskKey
  /** The first user message: title, body, labels, comments (and review threads), each part with its author. */
  text: string
  /** Ids of the comments already in `text`: comment detection starts after them. */
  seen: string[]
  channel: Channel
  /** A pull/merge request: its head branch, and the task that opened it (the marker in its body), if ctxagent did. */
  pull?: PullSource
}

/** A pull/merge request as a task source (docs/delivery.md#the-review-loop). */
export interface PullSource {
  head: PrHead
  /** The uuid the marker in its body names, or null. */
  opener: string | null
  /** Whether the bot's account opened it (then the marker is its own). */
  byBot: boolean
}

/** What the agent does with the issue while it works (docs/contract.md §13.1, §13.2). */
export interface Channel {
  /** Human name of the issue, e.g. "acme/shop#42". */
  readonly name: string
  /** The bot's own account, whose comments are never fed back (null: detection off). */
  readonly botName: string | null
  /** All comments (not system notes), oldest first; `since` narrows where the API can. `signal` aborts the request (and its waits). */
  listComments(since: string | null, signal?: AbortSignal): Promise<RemoteComment[]>
  /** Posts a comment; returns its id. */
  post(body: string, signal?: AbortSignal): Promise<string>
  /** Replaces a comment's text. */
  edit(id: string, body: string, signal?: AbortSignal): Promise<void>
}

/** An open issue, pull request or merge request carrying the poller's label (docs/contract.md §14.2). */
export interface LabelledItem {
  /** As `run --github`/`--gitlab` takes it: owner/repo#N, group/project#N or group/project!N. */
  ref: string
  labels: string[]
}

/** One issue, pull request or merge request as the forge has it now. */
export interface CurrentItem extends LabelledItem {
  open: boolean
}

/** A repository's issues as the poller sees them: the open ones with a label, and their labels changed. */
export interface Tracker {
  /** github:owner/repo or gitlab:group/project */
  readonly name: string
  listOpen(label: string): Promise<LabelledItem[]>
  /** One item read again (one GET), for a decision a listing taken earlier may no longer support; null when it is gone (404). */
  current(ref: string): Promise<CurrentItem | null>
  /** Adds `add` (unless null) and takes off each of `remove` it carries. */
  relabel(ref: string, add: string | null, remove: readonly string[]): Promise<void>
}

/**
 * Whether the trigger label on an item was put there by someone with write access
 * (docs/delivery.md#trust). Asked only when `sources.trusted` is `write`.
 */
export interface TriggerCheck {
  labelTrusted(ref: string, label: string): Promise<boolean>
}

/** An open pull or merge request that ctxagent opened (its body carries the marker), for the review loop. */
export interface OwnPull {
  /** owner/repo#N or group/project!N, as `run --github`/`--gitlab` takes it. */
  ref: string
  number: number
  url: string
  /** The head branch and its commit now. */
  branch: string
  sha: string
  /** The task that opened it, named by the marker in its body. */
  opener: string
  /** Whether the forge says the bot's account wrote it (false with no bot name configured). */
  byBot: boolean
  labels: string[]
}

/** Something on an own pull request that asks for a follow-up (docs/delivery.md#the-review-loop). */
export interface ReviewEvent {
  /** Unique on the forge: `review:ID`, `review-comment:ID`, `comment:ID`, `check:ID`, `status:ID`, `pipeline:ID`. */
  id: string
  kind: 'changes_requested' | 'review_comment' | 'comment' | 'check'
  /** Who wrote it (a login), or the failing check's name. */
  author: string
  /** The comment's text, or the failing check's description. */
  body: string
  at: string
  /** A review comment's file and line. */
  path?: string
}

/** The review loop's reads of a repository (docs/delivery.md#the-review-loop). */
export interface ReviewWatch {
  /** Open pull/merge requests whose body carries ctxagent's marker. */
  listOwnPulls(): Promise<OwnPull[]>
  /** Its reviews asking for changes, review comments and comments by people with write access (when `trusted` is write), and failed checks on its head; never the bot's own. */
  reviewEvents(pull: OwnPull): Promise<ReviewEvent[]>
  /** The tail of a failed check's log (at most `maxChars`), or null when the forge keeps none we can read. */
  checkLog(pull: OwnPull, event: ReviewEvent, maxChars: number): Promise<string | null>
}
