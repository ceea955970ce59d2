/**
 * Masking of secrets and personal data before anything is persisted (SPEC §8).
 * Each rule has cheap `hints`: its regex only runs when one of them occurs in the
 * text, which keeps masking off the hot path for ordinary messages. Hints are as
 * short and shared as the regex allows (one `gh` for all GitHub forms): every
 * hint is one scan of the whole text.
 */
interface MaskRule {
  name: string
  /** Literal substrings, one of which every match contains. */
  hints: readonly string[]
  /** Replaces every match in a text known to contain one of the hints. */
  apply: (text: string) => string
}

const regexRule = (name: string, hints: readonly string[], pattern: RegExp, replacement: string): MaskRule => ({
  name,
  hints,
  apply: (text) => text.replace(pattern, replacement),
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
  { name: 'email', hints: ['@'], apply: maskEmails },
]

// local@domain.tld with an alphabetic TLD of 2+ letters, so that package specs like
// lodash@4.17.21, actions/checkout@v4, image@sha256:… stay as they are. `git@host`
// is an SSH remote, not a person, and is kept. Found from each '@' outward, because
// a regex that tries every start position is slow on code full of '@'.
const DOMAIN = /(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}(?![A-Za-z0-9-])/y
const LOCAL = /[A-Za-z0-9._%+-]/

function maskEmails(text: string): string {
  let out = ''
  let copied = 0
  for (let at = text.indexOf('@'); at >= 0; at = text.indexOf('@', at + 1)) {
    DOMAIN.lastIndex = at + 1
    if (!DOMAIN.test(text)) continue
    let start = at
    while (start > copied && LOCAL.test(text[start - 1] as string)) start--
    if (start === at || text.slice(start, at) === 'git') continue
    out += `${text.slice(copied, start)}[EMAIL]`
    copied = DOMAIN.lastIndex
    at = copied - 1
  }
  return copied === 0 ? text : out + text.slice(copied)
}

/**
 * Every hint is anchored on its rarest character (by this order, else its first).
 * The scan jumps between occurrences of each anchor character with native indexOf
 * and only compares hints there: a handful of fast scans instead of one per hint.
 */
const ANCHOR_ORDER = '@J_-QXZWVYUA'

interface Anchor {
  hint: string
  offset: number
  /** The hint's first character: a cheap test before startsWith at common anchors like '_'. */
  first: number
  rule: number
}

const ANCHORS = new Map<string, Anchor[]>()
RULES.forEach((rule, index) => {
  for (const hint of rule.hints) {
    const char = [...ANCHOR_ORDER].find((c) => hint.includes(c)) ?? (hint[0] as string)
    const list = ANCHORS.get(char) ?? []
    list.push({ hint, offset: hint.indexOf(char), first: hint.charCodeAt(0), rule: index })
    ANCHORS.set(char, list)
  }
})
const ANCHOR_CHARS = [...ANCHORS.keys()]
const ANCHOR_GROUPS = [...ANCHORS.values()]

/** A bit per rule whose hint occurs in the text. */
function rulesWithHints(text: string): number {
  let found = 0
  for (let g = 0; g < ANCHOR_CHARS.length; g++) {
    const char = ANCHOR_CHARS[g] as string
    const anchors = ANCHOR_GROUPS[g] as Anchor[]
    for (let i = text.indexOf(char); i >= 0; i = text.indexOf(char, i + 1)) {
      for (let k = 0; k < anchors.length; k++) {
        const anchor = anchors[k] as Anchor
        const start = i - anchor.offset
        if (text.charCodeAt(start) !== anchor.first || (found & (1 << anchor.rule)) !== 0) continue
        if (text.startsWith(anchor.hint, start)) found |= 1 << anchor.rule
      }
    }
  }
  return found
}

export function maskText(text: string): string {
  const found = rulesWithHints(text)
  if (found === 0) return text
  let out = text
  RULES.forEach((rule, index) => {
    if (found & (1 << index)) out = rule.apply(out)
  })
  return out
}

/** Masks every string inside a JSON-like value (keys are left alone). */
export function maskValue<T>(value: T): T {
  if (typeof value === 'string') return maskText(value) as T
  if (Array.isArray(value)) return value.map((item) => maskValue(item)) as T
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) out[key] = maskValue(item)
    return out as T
  }
  return value
}
