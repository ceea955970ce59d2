import { applyRuns, longestSecret, maskRuns, maskText } from './mask.js'
import type { MaskRun } from './mask.js'

/**
 * Masking before cutting (docs/security.md#masking): a secret printed whole but lying
 * across the point where an output is cut (head and tail, a line's first characters)
 * would otherwise reach the task files and the LLM as two pieces no rule recognises.
 * So a text is masked whole first and cut after; a stream too large to hold is masked
 * in pieces that overlap by more than any secret is long, and a piece never ends inside
 * a match.
 */

/**
 * Every pattern's match that is a secret fits in this (a 4096-bit RSA private key block
 * is ~3.3 kB); longer installed secret values widen it. A match longer than this (an
 * endless run of key characters) is masked from its start to where the piece ends.
 */
const MIN_OVERLAP = 16 * 1024

export function maskOverlap(): number {
  return Math.max(MIN_OVERLAP, longestSecret())
}

/** Text taken in per masking pass, beyond the overlap kept back. */
export const MASK_BATCH = 64 * 1024

/**
 * A stream of text masked as it comes, in bounded memory: `emit` gets masked text in
 * order, each piece ending where no match runs across; `end()` masks the rest. What it
 * emits is what maskText of the whole would give, but for matches that depend on text
 * more than the overlap away (none of the rules' do).
 */
export class MaskingStream {
  private pending = ''

  constructor(private readonly emit: (masked: string) => void) {}

  push(chunk: string): void {
    this.pending += chunk
    const overlap = maskOverlap()
    if (this.pending.length < overlap + MASK_BATCH) return
    const text = this.pending
    const runs = maskRuns(text)
    const cut = safeCut(runs, text.length - overlap)
    this.emit(applyRuns(text, runs, 0, cut))
    this.pending = text.slice(cut)
  }

  end(): void {
    if (this.pending !== '') this.emit(maskText(this.pending))
    this.pending = ''
  }
}

/**
 * Where a piece may end at or before `at`: not inside a run (a run across it starts the
 * next piece). A run that starts the text and reaches past `at` ends the piece where it
 * ends, masked whole: the piece must move on.
 */
function safeCut(runs: readonly MaskRun[], at: number): number {
  for (const run of runs) {
    if (run.start >= at) break
    if (run.end > at) return run.start > 0 ? run.start : run.end
  }
  return at
}

/**
 * The first `max` characters of `text` as masked: masked with an overlap beyond the cut,
 * then cut, so a secret that starts before the cut is replaced whole.
 */
export function maskedHead(text: string, max: number): string {
  return maskText(text.length <= max ? text : text.slice(0, max + maskOverlap())).slice(0, max)
}
