import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { packageRoot } from './package-root.js'

let version: string | undefined

/** ctxagent's version, from its package.json (read once, when first asked): `--version`, traces' service.version, /metrics' build_info. */
export function ctxagentVersion(): string {
  version ??= (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version
  return version
}
