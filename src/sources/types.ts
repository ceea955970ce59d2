import type { TaskKey } from '../storage/task/metadata.js'

/** A comment (issue comment, MR note, inbox message) as the agent is told of it. */
export interface Comment {
  author: string
  body: string
  created_at: string
}

/** A comment on the task's issue, PR or MR, as the source reports it. */
export interface RemoteComment extends Comment {
  id: string
}

/** Where the task came from, and where it reports back (SPEC §13.1). */
export interface RemoteTask {
  key: TaskKey
  /** The first user message: title, body, labels, comments (and review threads), each part with its author. */
  text: string
  /** Ids of the comments already in `text`: comment detection starts after them. */
  seen: string[]
  channel: Channel
}

/** What the agent does with the issue while it works (SPEC §13.1, §13.2). */
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

/** An open issue, pull request or merge request carrying the poller's label (SPEC §14.2). */
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
