import { MIN_SECRET_LENGTH } from '../../config/secrets.js'

/**
 * Masking of secrets and personal data before anything is persisted or printed (docs/contract.md §8):
 * the exact secret values installed by `installSecrets`, and the patterns below. Every
 * match of either is found in the text as it is, then each run of overlapping matches is
 * replaced whole by its longest match's replacement (a secret value before a pattern of
 * the same length): a token that holds another secret's value, or a value that holds a
 * token, never leaves a piece of either behind.
 * Each rule has cheap `hints`: its regex only runs when one of them occurs in the
 * text, which keeps masking off the hot path for ordinary messages. Hints are as
 * short and shared as the regex allows (one `gh` for all GitHub forms): every
 * hint is one scan of the whole text.
 */
interface MaskRule {
  name: string
  /** Literal substrings, one of which every match contains. */
  hints: readonly string[]
  /** Adds every match in a text known to contain one of the hints to `out`. */
  find: (text: string, priority: number, out: Span[]) => void
}

/** A stretch of the text to replace; of overlapping ones, the longest wins, then the lowest priority. */
interface Span {
  start: number
  end: number
  replacement: string
  priority: number
}

const regexRule = (name: string, hints: readonly string[], pattern: RegExp, replacement: string): MaskRule => ({
  name,
  hints,
  find: (text, priority, out) => {
    for (const m of text.matchAll(pattern)) {
      const filled = replacement.includes('$') ? replacement.replace(/\$(\d)/g, (_, i: string) => m[Number(i)] ?? '') : replacement
      out.push({ start: m.index, end: m.index + m[0].length, replacement: filled, priority })
    }
  },
})

const RULES: readonly MaskRule[] = [
  regexRule('private key', ['PRIVATE KEY-----'], /-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----[\s\S]*?-----END \1PRIVATE KEY-----/g, '[PRIVATE_KEY]'),
  regexRule(
    'github',
    ['ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_', 'github_pat_'],
    /\b(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{20,255})\b/g,
    '[GITHUB_TOKEN]',
  ),
  regexRule('anthropic', ['sk-ant-'], /\bsk-ant-[A-Za-z0-9_-]{20,}/g, '[ANTHROPIC_KEY]'),
  regexRule('openai', ['sk-'], /\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}/g, '[OPENAI_KEY]'),
  regexRule('gitlab', ['glpat-'], /\bglpat-[A-Za-z0-9_-]{20,}/g, '[GITLAB_TOKEN]'),
  regexRule('aws access key id', ['AKIA', 'ASIA', 'ABIA', 'ACCA'], /\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b/g, '[AWS_ACCESS_KEY]'),
  regexRule(
    'aws secret key',
    ['aws_secret_access_key', 'AWS_SECRET_ACCESS_KEY'],
    /\b(aws_secret_access_key|AWS_SECRET_ACCESS_KEY)(["']?\s*[:=]\s*["']?)[A-Za-z0-9/+=]{40}/g,
    '$1$2[AWS_SECRET_KEY]',
  ),
  regexRule('slack', ['xoxa-', 'xoxb-', 'xoxp-', 'xoxo-', 'xoxs-', 'xoxr-'], /\bxox[abposr]-[A-Za-z0-9-]{10,}/g, '[SLACK_TOKEN]'),
  regexRule('jwt', ['eyJ'], /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, '[JWT]'),
  regexRule('google', ['AIza'], /\bAIza[0-9A-Za-z_-]{35}/g, '[GOOGLE_API_KEY]'),
  regexRule('stripe', ['sk_live_', 'rk_live_'], /\b(?:sk|rk)_live_[0-9A-Za-z]{20,}/g, '[STRIPE_KEY]'),
  regexRule('npm', ['npm_'], /\bnpm_[A-Za-z0-9]{36}\b/g, '[NPM_TOKEN]'),
  regexRule('bearer', ['Bearer ', 'bearer '], /\b([Bb]earer) [A-Za-z0-9._~+/-]{20,}=*/g, '$1 [TOKEN]'),
  { name: 'email', hints: ['@'], find: findEmails },
]

// local@domain.tld with an alphabetic TLD of 2+ letters, so that package specs like
// lodash@4.17.21, actions/checkout@v4, image@sha256:… stay as they are. `git@host`
// is an SSH remote, not a person, and is kept. Found from each '@' outward, because
// a regex that tries every start position is slow on code full of '@'.
const DOMAIN = /(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}(?![A-Za-z0-9-])/y

/** [A-Za-z0-9._%+-] */
function isLocalChar(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x5f || c === 0x25 || c === 0x2b || c === 0x2d
}

function findEmails(text: string, priority: number, out: Span[]): void {
  let copied = 0
  for (let at = text.indexOf('@'); at >= 0; at = text.indexOf('@', at + 1)) {
    // The local part first: '@@', ' @decorator' and 'a @ b' end here without a regex.
    let start = at
    while (start > copied && isLocalChar(text.charCodeAt(start - 1))) start--
    if (start === at || (at - start === 3 && text.startsWith('git', start))) continue
    DOMAIN.lastIndex = at + 1
    if (!DOMAIN.test(text)) continue
    copied = DOMAIN.lastIndex
    out.push({ start, end: copied, replacement: '[EMAIL]', priority })
    at = copied - 1
  }
}

/**
 * Every hint is anchored on its rarest character (by this order, else its first).
 * The scan jumps between occurrences of each anchor character with native indexOf
 * and, at each, looks up the hints whose neighbouring character (the one before
 * the anchor, or after it when the hint starts with it) is the one in the text:
 * in code full of '-' and '_' most occurrences are rejected by one array lookup.
 */
const ANCHOR_ORDER = '@J_-QXZWVYUA'

interface Anchor {
  hint: string
  offset: number
  rule: number
}

/** Candidate anchors by the char code of a neighbour (ASCII only: every hint is ASCII). */
type ByNeighbour = (Anchor[] | undefined)[]

interface AnchorGroup {
  char: string
  /** Bits of every rule with a hint in this group: once all are found, the scan stops. */
  rules: number
  /** Bits of rules whose hint is the anchor character alone ('@'). */
  bare: number
  before: ByNeighbour
  after: ByNeighbour
}

const GROUPS: AnchorGroup[] = []
RULES.forEach((rule, index) => {
  for (const hint of rule.hints) {
    const char = [...ANCHOR_ORDER].find((c) => hint.includes(c)) ?? (hint[0] as string)
    let group = GROUPS.find((g) => g.char === char)
    if (!group) GROUPS.push((group = { char, rules: 0, bare: 0, before: [], after: [] }))
    group.rules |= 1 << index
    const offset = hint.indexOf(char)
    const anchor: Anchor = { hint, offset, rule: index }
    if (hint.length === 1) group.bare |= 1 << index
    else if (offset > 0) (group.before[hint.charCodeAt(offset - 1)] ??= []).push(anchor)
    else (group.after[hint.charCodeAt(1)] ??= []).push(anchor)
  }
})

/** A bit per rule whose hint occurs in the text. */
function rulesWithHints(text: string): number {
  let found = 0
  for (const group of GROUPS) {
    const { char, rules, bare, before, after } = group
    for (let i = text.indexOf(char); i >= 0 && (found & rules) !== rules; i = text.indexOf(char, i + 1)) {
      found |= bare
      // charCodeAt outside the text is NaN, which no table holds.
      found = matchAt(text, i, before[text.charCodeAt(i - 1)], found)
      found = matchAt(text, i, after[text.charCodeAt(i + 1)], found)
    }
  }
  return found
}

function matchAt(text: string, at: number, anchors: Anchor[] | undefined, found: number): number {
  if (anchors === undefined) return found
  for (const anchor of anchors) {
    if ((found & (1 << anchor.rule)) === 0 && text.startsWith(anchor.hint, at - anchor.offset)) found |= 1 << anchor.rule
  }
  return found
}

/**
 * The exact secret values in force in this process (config keys and tokens, the
 * environment's credentials, MCP servers' env values), each with the forms it is
 * written in elsewhere: URL-encoded, JSON-escaped, and base64 of the value alone.
 * Installed once at start-up (`installSecrets`), so that every writer and printer
 * that masks knows them without being told: patterns catch keys of known shapes,
 * these catch the ones ctxagent actually holds, whatever their shape.
 */
interface SecretForm {
  value: string
  replacement: string
}

let secretForms: SecretForm[] = []

/**
 * Installs the secret values every mask call replaces from now on (`name` says which
 * setting held it, shown instead of the value: `[SECRET:github.token]`). Values under
 * MIN_SECRET_LENGTH characters are left out. Replaces what was installed before.
 */
export function installSecrets(secrets: readonly { name: string; value: string }[]): void {
  const forms = new Map<string, string>()
  for (const { name, value } of secrets) {
    if (value.length < MIN_SECRET_LENGTH) continue
    const replacement = `[SECRET:${name}]`
    const b64 = Buffer.from(value, 'utf8').toString('base64')
    for (const form of [
      value,
      encodeURIComponent(value),
      JSON.stringify(value).slice(1, -1),
      b64,
      b64.replace(/=+$/, ''),
      Buffer.from(value, 'utf8').toString('base64url'),
    ]) {
      if (form.length >= MIN_SECRET_LENGTH && !forms.has(form)) forms.set(form, replacement)
    }
  }
  memo = null
  // Longest first, so that a value that contains another is replaced whole.
  secretForms = [...forms].map(([value, replacement]) => ({ value, replacement })).sort((a, b) => b.value.length - a.value.length)
}

/** True when secret values are installed (for tests and `doctor`-like reports). */
export function secretsInstalled(): number {
  return secretForms.length
}

/** Every occurrence of an installed secret value (priority 0: before a pattern of the same length). */
function findSecrets(text: string, out: Span[]): void {
  for (const form of secretForms) {
    for (let at = text.indexOf(form.value); at >= 0; at = text.indexOf(form.value, at + form.value.length)) {
      out.push({ start: at, end: at + form.value.length, replacement: form.replacement, priority: 0 })
    }
  }
}

/** Each run of overlapping spans as one span: the run's extent, its longest span's replacement. */
function runsOf(spans: Span[]): Span[] {
  spans.sort((a, b) => a.start - b.start || b.end - a.end)
  const runs: Span[] = []
  for (let i = 0; i < spans.length; ) {
    let best = spans[i] as Span
    const start = best.start
    let end = best.end
    for (i++; i < spans.length && (spans[i] as Span).start < end; i++) {
      const span = spans[i] as Span
      const [length, bestLength] = [span.end - span.start, best.end - best.start]
      if (length > bestLength || (length === bestLength && span.priority < best.priority)) best = span
      end = Math.max(end, span.end)
    }
    runs.push({ start, end, replacement: best.replacement, priority: best.priority })
  }
  return runs
}

/** `text` from `from` to `to` with each run inside it replaced (runs from runsOf: sorted, apart). */
export function applyRuns(text: string, runs: readonly MaskRun[], from = 0, to = text.length): string {
  let out = ''
  let copied = from
  for (const run of runs) {
    if (run.start < from || run.end > to) continue
    out += text.slice(copied, run.start) + run.replacement
    copied = run.end
  }
  return out + text.slice(copied, to)
}

/** A stretch of a text maskText replaces, and with what. */
export type MaskRun = Readonly<Pick<Span, 'start' | 'end' | 'replacement'>>

/**
 * Where maskText would replace what in `text`, sorted and apart: for masking a text in
 * pieces (mask-stream.ts), where a piece must not end inside one of them.
 */
export function maskRuns(text: string): MaskRun[] {
  const spans: Span[] = []
  if (secretForms.length > 0) findSecrets(text, spans)
  const found = rulesWithHints(text) & ALL_RULES
  RULES.forEach((rule, index) => {
    if (found & (1 << index)) rule.find(text, index + 1, spans)
  })
  return spans.length === 0 ? [] : runsOf(spans)
}

/** The longest installed secret form (a piece masked apart must overlap the next by at least this much). */
export function longestSecret(): number {
  return secretForms[0]?.value.length ?? 0
}

/** Secrets (installed values and key patterns) and personal data (e-mail addresses): for everything stored or posted. */
export function maskText(text: string): string {
  return mask(text, ALL_RULES)
}

/**
 * Secrets only, e-mail addresses kept: for what leaves the process where an address may
 * be the point (an MCP tool's arguments) or is the operator's own (stdout, stderr).
 */
export function maskCredentials(text: string): string {
  return mask(text, CREDENTIAL_RULES)
}

const ALL_RULES = (1 << RULES.length) - 1
const CREDENTIAL_RULES = ALL_RULES & ~(1 << RULES.findIndex((r) => r.name === 'email'))

/**
 * The last text masked and what it became: a tool's result is masked for messages.jsonl
 * and again, the same string, for tools.jsonl; the second costs one comparison
 * (the same string object compares by pointer). Forgotten when the secrets change.
 */
let memo: { input: string; rules: number; output: string } | null = null
/** Shorter texts are masked again: cheaper than keeping them. */
const MEMO_MIN = 1024

function mask(input: string, rules: number): string {
  if (input.length < MEMO_MIN) return maskNow(input, rules)
  if (memo !== null && memo.rules === rules && memo.input === input) return memo.output
  const output = maskNow(input, rules)
  memo = { input, rules, output }
  return output
}

function maskNow(input: string, rules: number): string {
  const spans: Span[] = []
  if (secretForms.length > 0) findSecrets(input, spans)
  const found = rulesWithHints(input) & rules
  if (found === 0 && spans.length === 0) return input
  RULES.forEach((rule, index) => {
    if (found & (1 << index)) rule.find(input, index + 1, spans)
  })
  return spans.length === 0 ? input : applyRuns(input, runsOf(spans))
}

/** Masks every string inside a JSON-like value (keys are left alone). */
export function maskValue<T>(value: T, maskString: (text: string) => string = maskText): T {
  if (typeof value === 'string') return maskString(value) as T
  if (Array.isArray(value)) return value.map((item) => maskValue(item, maskString)) as T
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) out[key] = maskValue(item, maskString)
    return out as T
  }
  return value
}

/**
 * What of the secrets masking knows occurs in `text`, by name, never by value: each
 * installed secret (`github.token`, …) and each key pattern (`github token pattern`;
 * e-mail addresses are not secrets). Delivery refuses a change holding any
 * (docs/delivery.md#secrets).
 */
export function secretNamesIn(text: string): string[] {
  const names = new Set<string>()
  for (const form of secretForms) if (text.includes(form.value)) names.add(form.replacement.slice('[SECRET:'.length, -1))
  const found = rulesWithHints(text) & CREDENTIAL_RULES
  RULES.forEach((rule, index) => {
    if ((found & (1 << index)) === 0) return
    const spans: Span[] = []
    rule.find(text, 0, spans)
    if (spans.length > 0) names.add(`${rule.name} pattern`)
  })
  return [...names]
}
