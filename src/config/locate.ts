import { join } from 'node:path'
import { isErrno, UsageError } from '../errors.js'
import { describeErrno, readRegularFile } from '../input-file.js'
import { grouped, shortPath } from '../text.js'
import type { Config } from './schema.js'
import { urlWithCredentials } from './secrets.js'
import { shown } from './shown.js'
import { whyUntrusted } from './trust.js'
import { isHttpUrl } from './urls.js'
import { xdgDirectory } from '../xdg.js'

// Where the config file is, its text, and what the environment adds to it: the parts of
// loading a config that need neither YAML nor zod (docs/development.md#start-up). Parsing
// and validating are load.ts; config-cache.ts skips them for a file already validated.

export interface LoadedConfig {
  config: Config
  /** The file it came from, or null when only defaults (and the environment) apply. */
  source: string | null
  /** One line for the operator (a ./config.yaml that is no longer read), printed once by the caller. */
  notice?: string
}

export interface ConfigLocation {
  /** --config */
  flag?: string | undefined
  env: NodeJS.ProcessEnv
  cwd: string
}

/** What `--config none` (or CTXAGENT_CONFIG=none) means: no file at all, only defaults and the environment. */
export const NO_CONFIG = 'none'

/** The config file found and its text: `file` null when none is read (then `text` is ''). */
export interface ConfigText {
  file: string | null
  text: string
  /** Whether --config or CTXAGENT_CONFIG named it (or none): then no notice about ./config.yaml. */
  explicit: boolean
}

/**
 * `--config` > `CTXAGENT_CONFIG` > `$XDG_CONFIG_HOME/ctxagent/config.yaml` (else
 * ~/.config/…) > `/etc/ctxagent/config.yaml`, the first found (docs/contract.md §1). Nothing in the
 * current directory is read: it is `run`'s default workspace, where a model writes files
 * (docs/contract.md §8). A file anyone but its owner could change, or owned by someone
 * other than root or this user, is refused (as sshd's StrictModes does).
 */
export function readConfigText(where: ConfigLocation): ConfigText {
  if (where.flag === '') throw new UsageError('--config: the path is empty', `give the config file to use, ${NO_CONFIG} for no file, or leave --config out`)
  const explicit = where.flag ?? nonEmpty(where.env.CTXAGENT_CONFIG) ?? undefined
  if (explicit === NO_CONFIG) return { file: null, text: '', explicit: true }
  if (explicit !== undefined)
    return { file: explicit, text: readConfigFile(resolveFrom(where.cwd, explicit), shownConfigPath(explicit), true) ?? '', explicit: true }
  for (const path of configCandidates(where.env)) {
    const text = readConfigFile(path, shownConfigPath(path), false)
    if (text !== null) return { file: path, text, explicit: false }
  }
  return { file: null, text: '', explicit: false }
}

/**
 * The config files looked for, in order, when neither --config nor CTXAGENT_CONFIG names
 * one: the user's (XDG_CONFIG_HOME, else ~/.config) and the system's. Never one in the
 * current directory.
 */
export function configCandidates(env: NodeJS.ProcessEnv): string[] {
  return [join(xdgDirectory(env, 'XDG_CONFIG_HOME'), 'ctxagent', 'config.yaml'), SYSTEM_CONFIG]
}

const SYSTEM_CONFIG = '/etc/ctxagent/config.yaml'

/** The names in the current directory that get a notice when they look like ctxagent's config (load.ts reads them). */
export const CWD_CONFIG_NAMES = ['ctxagent.yaml', 'config.yaml']

export const MAX_CONFIG_BYTES = 1 << 20

/**
 * A config file: a regular file of at most 1 MB (readRegularFile), so `--config
 * /dev/zero` cannot read forever nor a FIFO hang the command. Null when a looked-for file
 * (not one named by --config or CTXAGENT_CONFIG) does not exist. Errors keep the shape
 * `<file>: cannot read config (<why>)`, errno in words.
 */
function readConfigFile(path: string, shownPath: string, explicit: boolean): string | null {
  const read = readRegularFile(path, MAX_CONFIG_BYTES)
  if (read.ok) {
    const untrusted = whyUntrusted(path, read.stat)
    if (untrusted !== null)
      throw new UsageError(
        `${shownPath}: refused as config: ${untrusted.why}`,
        `${untrusted.fix}; ctxagent reads a config file only when no one but its owner (root or you) can change it`,
      )
    return read.text
  }
  if (read.problem === 'unreadable' && (isErrno(read.err, 'ENOENT') || isErrno(read.err, 'ENOTDIR')) && !explicit) return null
  const why =
    read.problem === 'unreadable'
      ? describeErrno(read.err)
      : read.problem === 'directory'
        ? 'it is a directory'
        : read.problem === 'size'
          ? `${grouped(read.size)} bytes; the limit is 1 MB`
          : 'not a regular file'
  throw new UsageError(
    `${shownPath}: cannot read config (${why})`,
    explicit
      ? 'check the --config path or CTXAGENT_CONFIG'
      : `ctxagent reads the first of ~/.config/ctxagent/config.yaml, /etc/ctxagent/config.yaml: fix this one, or pass --config ${NO_CONFIG}`,
  )
}

export function shownConfigPath(file: string): string {
  return shortPath(shown(file, 4096))
}

/** The keys an environment variable fills only when the file does not set them. */
export const ENVIRONMENT_URL_KEYS = ['llm.openai.base_url', 'llm.anthropic.base_url', 'llm.ollama.base_url'] as const

/** Which of ENVIRONMENT_URL_KEYS the file's data sets (to a value, not null). */
export function givenUrlKeys(data: unknown): string[] {
  return ENVIRONMENT_URL_KEYS.filter((key) => {
    let node = data
    for (const step of key.split('.')) {
      if (node === null || typeof node !== 'object' || !Object.hasOwn(node, step)) return false
      node = (node as Record<string, unknown>)[step]
    }
    return node !== undefined && node !== null
  })
}

/**
 * The environment's part, then the check of every URL in force. The ecosystem's variables,
 * each below the file (documented in docs/configuration.md): the OpenAI SDK's
 * OPENAI_API_KEY, OPENAI_BASE_URL (only when the file sets no llm.openai.base_url), the
 * Anthropic SDK's ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL (the same way), Ollama's
 * OLLAMA_HOST, gh's GH_TOKEN before GITHUB_TOKEN, and GITLAB_TOKEN. A URL from the
 * environment is checked as strictly as one from the file. `given`: givenUrlKeys of the file.
 */
export function withEnvironment(config: Config, given: readonly string[], env: NodeJS.ProcessEnv): Config {
  config.llm.openai.api_key ??= nonEmpty(env.OPENAI_API_KEY)
  config.llm.anthropic.api_key ??= nonEmpty(env.ANTHROPIC_API_KEY)
  config.github.token ??= nonEmpty(env.GH_TOKEN) ?? nonEmpty(env.GITHUB_TOKEN)
  config.gitlab.token ??= nonEmpty(env.GITLAB_TOKEN)
  const openaiUrl = nonEmpty(env.OPENAI_BASE_URL)
  if (openaiUrl !== null && !given.includes('llm.openai.base_url')) config.llm.openai.base_url = envUrl('OPENAI_BASE_URL', openaiUrl)
  const anthropicUrl = nonEmpty(env.ANTHROPIC_BASE_URL)
  if (anthropicUrl !== null && !given.includes('llm.anthropic.base_url')) config.llm.anthropic.base_url = envUrl('ANTHROPIC_BASE_URL', anthropicUrl)
  const ollamaHost = nonEmpty(env.OLLAMA_HOST)
  if (ollamaHost !== null && !given.includes('llm.ollama.base_url')) {
    // Ollama's own form is host:port (http assumed); its OpenAI-compatible API is under /v1.
    const url = /^https?:\/\//i.test(ollamaHost) ? ollamaHost : `http://${ollamaHost}`
    config.llm.ollama.base_url = `${envUrl('OLLAMA_HOST', url).replace(/\/+$/, '')}/v1`
  }
  const withUser = urlWithCredentials(config, env)
  if (withUser !== null) {
    throw new UsageError(
      `${withUser} carries a user name or password (scheme://user:password@host); ctxagent refuses credentials in URLs, which would be printed and stored`,
      'give the URL without user:password@ and the key in its own setting (api_key, token, telemetry.headers) or variable',
    )
  }
  return config
}

function envUrl(name: string, value: string): string {
  if (!isHttpUrl(value))
    throw new UsageError(
      `${name} must be an http(s) URL, like http://127.0.0.1:8080/v1 (got '${shown(value.replace(/\/\/[^/@\s]*@/, '//…@'), 80)}')`,
      `fix or unset ${name}`,
    )
  return value
}

function nonEmpty(value: string | undefined): string | null {
  return value === undefined || value === '' ? null : value
}

function resolveFrom(cwd: string, file: string): string {
  return file.startsWith('/') ? file : `${cwd}/${file}`
}
