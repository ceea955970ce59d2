/**
 * Masking of secrets and personal data before anything is persisted (SPEC §8).
 * Each rule has cheap `hints`: its regex only runs when one of them occurs in the
 * text, which keeps masking off the hot path for ordinary messages.
 */
interface MaskRule {
  name: string
  hints: readonly string[]
  pattern: RegExp
  replacement: string
}

const RULES: readonly MaskRule[] = [
  {
    name: 'private key',
    hints: ['PRIVATE KEY-----'],
    pattern: /-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----[\s\S]*?-----END \1PRIVATE KEY-----/g,
    replacement: '[PRIVATE_KEY]',
  },
  {
    name: 'github',
    hints: ['ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_', 'github_pat_'],
    pattern: /\b(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{20,255})\b/g,
    replacement: '[GITHUB_TOKEN]',
  },
  {
    name: 'anthropic',
    hints: ['sk-ant-'],
    pattern: /\bsk-ant-[A-Za-z0-9_-]{20,}/g,
    replacement: '[ANTHROPIC_KEY]',
  },
  {
    name: 'openai',
    hints: ['sk-'],
    pattern: /\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}/g,
    replacement: '[OPENAI_KEY]',
  },
  { name: 'gitlab', hints: ['glpat-'], pattern: /\bglpat-[A-Za-z0-9_-]{20,}/g, replacement: '[GITLAB_TOKEN]' },
  {
    name: 'aws access key id',
    hints: ['AKIA', 'ASIA', 'ABIA', 'ACCA'],
    pattern: /\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b/g,
    replacement: '[AWS_ACCESS_KEY]',
  },
  {
    name: 'aws secret key',
    hints: ['aws_secret_access_key', 'AWS_SECRET_ACCESS_KEY'],
    pattern: /\b(aws_secret_access_key|AWS_SECRET_ACCESS_KEY)(["']?\s*[:=]\s*["']?)[A-Za-z0-9/+=]{40}/g,
    replacement: '$1$2[AWS_SECRET_KEY]',
  },
  { name: 'slack', hints: ['xox'], pattern: /\bxox[abposr]-[A-Za-z0-9-]{10,}/g, replacement: '[SLACK_TOKEN]' },
  {
    name: 'jwt',
    hints: ['eyJ'],
    pattern: /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g,
    replacement: '[JWT]',
  },
  { name: 'google', hints: ['AIza'], pattern: /\bAIza[0-9A-Za-z_-]{35}/g, replacement: '[GOOGLE_API_KEY]' },
  {
    name: 'stripe',
    hints: ['_live_'],
    pattern: /\b(?:sk|rk)_live_[0-9A-Za-z]{20,}/g,
    replacement: '[STRIPE_KEY]',
  },
  { name: 'npm', hints: ['npm_'], pattern: /\bnpm_[A-Za-z0-9]{36}\b/g, replacement: '[NPM_TOKEN]' },
  {
    name: 'bearer',
    hints: ['Bearer ', 'bearer '],
    pattern: /\b([Bb]earer) [A-Za-z0-9._~+/-]{20,}=*/g,
    replacement: '$1 [TOKEN]',
  },
  {
    // local@domain.tld with an alphabetic TLD of 2+ letters, so that package
    // specs like lodash@4.17.21, actions/checkout@v4, image@sha256:… stay as they are.
    // `git@host` is an SSH remote, not a person, and is kept.
    name: 'email',
    hints: ['@'],
    pattern: /(?<![A-Za-z0-9._%+-])(?!git@)[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}(?![A-Za-z0-9-])/g,
    replacement: '[EMAIL]',
  },
]

export function maskText(text: string): string {
  let out = text
  for (const rule of RULES) {
    if (!rule.hints.some((hint) => out.includes(hint))) continue
    out = out.replace(rule.pattern, rule.replacement)
  }
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
