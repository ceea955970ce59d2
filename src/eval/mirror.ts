import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import { HELPER, helperEnv } from '../delivery/credential-helper.js'
import { git } from '../delivery/git.js'
import type { GitOptions } from '../delivery/git.js'
import { cloneCredentials, credentialFor } from '../workspace/clone.js'

/**
 * The bare clone of a suite's repository URL under `mirrors` (one per URL, made once):
 * what trials and checks archive their starting trees from. A URL on the host of a
 * configured forge is cloned with its token, given to git by the credential helper for
 * that command only (docs/delivery.md#the-tokens-path); any other with git's own credentials.
 */
export async function mirrorOf(url: string, mirrors: string, config: Config): Promise<string> {
  const dir = join(mirrors, `${createHash('sha256').update(url).digest('hex').slice(0, 16)}.git`)
  if (existsSync(join(dir, 'HEAD'))) return dir
  mkdirSync(mirrors, { recursive: true })
  const partial = `${dir}.${process.pid}.partial`
  rmSync(partial, { recursive: true, force: true })
  await git(['clone', '--quiet', '--bare', '--no-tags', '--', url, partial], { safeDir: partial, cwd: mirrors, ...remote(url, config) })
  rmSync(dir, { recursive: true, force: true })
  renameSync(partial, dir)
  return dir
}

/** Fetches `ref` of the URL into the mirror as `into` (a pull request's head the default branch does not hold). */
export async function fetchInto(mirror: string, url: string, ref: string, into: string, config: Config): Promise<void> {
  await git(['fetch', '--quiet', '--no-tags', '--no-write-fetch-head', '--', url, `+${ref}:${into}`], { safeDir: mirror, cwd: mirror, ...remote(url, config) })
}

function remote(url: string, config: Config): Partial<GitOptions> {
  const credential = credentialFor(url, cloneCredentials(config))
  const env = credential === null ? null : helperEnv(url, credential.username, credential.token)
  if (env === null) return { hostConfig: true }
  return { config: ['credential.helper=', `credential.helper=${HELPER}`], env }
}
