/*
 * What the config's schema (schema.ts, environment.ts) and code that runs without zod both
 * use: fixed lists, defaults and key rules. Kept apart so that importing them loads no zod:
 * `run` reaches its first LLM request without it (docs/development.md#start-up).
 */

/**
 * tools.limits' defaults, per command: enough for `npm test`, tsc and a C compiler
 * (measured: docs/security.md), low enough that a fork bomb or a memory hog stops.
 */
export const DEFAULT_LIMITS = { memory_mb: 4096, processes: 1024, file_size_mb: 1024, open_files: 4096, cpu_seconds: 600 } as const

export const DELIVER_MODES = ['none', 'branch', 'pr'] as const
export type DeliverMode = (typeof DELIVER_MODES)[number]

export const PROVIDERS = ['openai', 'anthropic', 'ollama', 'replay', 'none'] as const
export type Provider = (typeof PROVIDERS)[number]

/** An `environments:` key: `owner/repo` or an absolute path. */
export function isEnvironmentKey(key: string): boolean {
  return key.startsWith('/') || /^[^/\s]+(\/[^/\s]+)+$/.test(key)
}
