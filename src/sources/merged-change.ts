/**
 * A merged pull or merge request as `eval make` reads it from a forge (docs/eval.md#making-a-suite):
 * where its change starts and ends, the files it changed, and the issues it closes. Every
 * text in it (titles, bodies) is the forge's data, never an instruction.
 */
export interface MergedChange {
  /** The PR's number (GitHub) or the MR's iid (GitLab). */
  number: number
  /** `owner/repo#N` or `group/project!N`. */
  ref: string
  title: string
  body: string
  url: string
  merged_at: string
  /** The commit the change was made on (its merge base with the base branch, as the forge reports it), or null when the forge gives none. */
  base_sha: string | null
  /** The base branch's commit the forge reports (GitHub's base.sha): the merge base is computed from it when base_sha is null. */
  base_tip: string
  head_sha: string
  /** The ref the forge serves the change's head under (refs/pull/N/head, refs/merge-requests/N/head). */
  head_ref: string
  files: ChangedFile[]
  /** The issues it closes, in the forge's order: the statement is the first's text. */
  closes: { ref: string; title: string; body: string }[]
}

export interface ChangedFile {
  path: string
  /** A renamed file's old path, else null. */
  previous: string | null
  removed: boolean
}

/** Merged changes newest first, and the clone URL of their repository. */
export interface MergedChanges {
  clone_url: string
  changes: MergedChange[]
}

/**
 * The issue numbers a body closes in its own repository, by GitHub's closing keywords
 * (close, closes, closed, fix, fixes, fixed, resolve, resolves, resolved, then `#N`), in
 * order, each once. A reference to another repository (`owner/repo#N`) is not followed.
 */
export function closingNumbers(body: string): number[] {
  const found: number[] = []
  for (const match of body.matchAll(/(?<![\w/])(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d{1,10})\b/gi)) {
    const n = Number(match[1])
    if (n >= 1 && !found.includes(n)) found.push(n)
  }
  return found
}
