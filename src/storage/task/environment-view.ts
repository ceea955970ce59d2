import type { ImageRecord, InstructionFile, TaskEnvironment, TaskInstructions, TestRun } from './state.js'

// state.json's `environment`, `test_run` and `instructions` as readers show them (docs/contract.md §16.3–§16.5): a damaged field shows nothing, never stops a command.

export function environmentOf(state: { environment?: unknown } | null | undefined): TaskEnvironment | null {
  const e = state?.environment
  if (e === null || typeof e !== 'object' || Array.isArray(e)) return null
  const r = e as Record<string, unknown>
  if (r.status !== 'ready' && r.status !== 'setup_failed' && r.status !== 'stopped') return null
  const text = (v: unknown) => (typeof v === 'string' ? v : null)
  const list = (v: unknown) => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [])
  const cache = r.cache === 'hit' || r.cache === 'miss' || r.cache === 'failed' ? r.cache : 'none'
  return {
    status: r.status,
    file: text(r.file),
    operator: text(r.operator),
    base: text(r.base) ?? '',
    cache,
    setup_seconds: typeof r.setup_seconds === 'number' ? r.setup_seconds : null,
    restored: list(r.restored),
    kept: list(r.kept),
    test: text(r.test),
    error: text(r.error),
    tail: text(r.tail),
    ...imageOf(r.image),
  }
}

function imageOf(v: unknown): { image?: ImageRecord } {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return {}
  const r = v as Record<string, unknown>
  if (typeof r.source !== 'string' || (r.kind !== 'directory' && r.kind !== 'oci' && r.kind !== 'docker-save')) return {}
  const cache = r.cache === 'hit' || r.cache === 'miss' ? r.cache : 'none'
  return { image: { source: r.source, kind: r.kind, digest: typeof r.digest === 'string' ? r.digest : null, cache } }
}

/** `image /srv/images/node.tar (docker-save sha256:0123456789ab, unpacked)`. */
export function imageText(i: ImageRecord): string {
  const how = i.cache === 'miss' ? ', unpacked' : i.cache === 'hit' ? ', cached' : ''
  return `image ${i.source} (${i.kind}${i.digest !== null ? ` ${i.digest.slice(0, 19)}` : ''}${how})`
}

export function testRunOf(state: { test_run?: unknown } | null | undefined): TestRun | null {
  const t = state?.test_run
  if (t === null || typeof t !== 'object' || Array.isArray(t)) return null
  const r = t as Record<string, unknown>
  if (typeof r.command !== 'string') return null
  return {
    command: r.command,
    exit_code: typeof r.exit_code === 'number' ? r.exit_code : null,
    timed_out: r.timed_out === true,
    duration_ms: typeof r.duration_ms === 'number' ? r.duration_ms : 0,
    tail: typeof r.tail === 'string' ? r.tail : '',
    at: typeof r.at === 'string' ? r.at : '',
  }
}

/** One line: where the definition came from and what the cache did, or why setup failed. */
export function environmentLine(e: TaskEnvironment): string {
  const from = [e.file, e.operator === null ? null : `environments.${e.operator}`].filter((x) => x !== null).join(' + ') || '-'
  if (e.status === 'setup_failed') return `setup failed: ${e.error ?? 'unknown'} (${from})`
  if (e.status === 'stopped') return `not ready: ${e.error ?? 'stopped'}; a resume prepares it again (${from})`
  const cache = e.cache === 'none' ? 'no setup' : `cache ${e.cache}${e.setup_seconds !== null ? `, setup ${e.setup_seconds}s` : ''}`
  return `${from}; ${cache}${e.restored.length > 0 ? `; restored ${e.restored.join(', ')}` : ''}${e.image !== undefined ? `; ${imageText(e.image)}` : ''}`
}

/** `npm test`: exit 0 (1.2s), or timed out. */
export function testRunLine(t: TestRun): string {
  const how = t.timed_out ? 'timed out' : `exit ${t.exit_code ?? 'unknown'}`
  return `\`${t.command}\`: ${how} (${(t.duration_ms / 1000).toFixed(1)}s)`
}

export function instructionsOf(state: { instructions?: unknown } | null | undefined): TaskInstructions | null {
  const i = state?.instructions
  if (i === null || typeof i !== 'object' || Array.isArray(i)) return null
  const r = i as Record<string, unknown>
  if (r.source !== 'commit' && r.source !== 'workspace') return null
  const files = (Array.isArray(r.files) ? r.files : []).flatMap((f): InstructionFile[] => {
    if (f === null || typeof f !== 'object' || typeof (f as Record<string, unknown>).path !== 'string') return []
    const g = f as Record<string, unknown>
    return [
      { path: g.path as string, bytes: typeof g.bytes === 'number' ? g.bytes : 0, id: typeof g.id === 'string' ? g.id : '', truncated: g.truncated === true },
    ]
  })
  const refused = Array.isArray(r.refused) ? r.refused.filter((x): x is string => typeof x === 'string') : []
  return { source: r.source, base: typeof r.base === 'string' ? r.base : '', files, refused }
}

/** `AGENTS.md (2140 bytes) from origin/HEAD at 0123456789ab`, what was cut, and what was not read. */
export function instructionsLine(i: TaskInstructions): string {
  const files = i.files.map((f) => `${f.path} (${f.bytes} bytes${f.truncated ? ', cut' : ''})`).join(', ')
  const given = files === '' ? 'none given' : `${files} from ${i.base}`
  return `${given}${i.refused.length > 0 ? `; not read: ${i.refused.join('; ')}` : ''}`
}
