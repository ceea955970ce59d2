import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/**
 * The installed package's root (where package.json, bin/ and demo/ are), found from
 * this module's own location: the same whether it runs from dist/ or from bundle/.
 */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'bin', 'ctxagent'))) return dir
    dir = dirname(dir)
  }
  throw new Error(`cannot find the ctxagent package root above ${fileURLToPath(import.meta.url)}`)
}
