import { lookup } from 'node:dns/promises'
import type { EnvironmentSpec } from '../../config/environment.js'
import type { Config } from '../../config/schema.js'
import type { Check } from '../../operations/doctor-check.js'
import { resolveEnvironment } from './definition.js'
import { readImageSource } from './image-source.js'
import { MAX_IMAGE_BYTES } from './image.js'
import { MAX_IMAGE_MEMBERS } from './image-layer.js'

// `ctxagent doctor`'s environment lines (docs/environments.md#the-file): the definition read as a task would, its hosts, its secrets and its image.

/** One line per environment: the workspace's (as a run there would read it), else each of the config's. */
export async function environmentChecks(config: Config, workspace: string | null, env: NodeJS.ProcessEnv = process.env): Promise<Check[]> {
  if (workspace !== null) {
    try {
      const found = await resolveEnvironment(config.environments, workspace, null)
      if (found === null)
        return [
          {
            name: 'environment',
            status: 'skip',
            message: `${workspace} has no environment (.ctxagent/environment.yml at its default branch, or environments: in the config)`,
          },
        ]
      const from = [found.file, found.operator === null ? null : `environments.${found.operator}`].filter((x) => x !== null).join(' and ')
      return [await specCheck('environment', from, found.spec, env)]
    } catch (err) {
      return [{ name: 'environment', status: 'fail', message: (err as Error).message, hint: 'fix it on the default branch (docs/environments.md)' }]
    }
  }
  return Promise.all(Object.entries(config.environments).map(([key, spec]) => specCheck(`environment ${key}`, `environments.${key}`, spec, env)))
}

async function specCheck(name: string, from: string, spec: EnvironmentSpec, env: NodeJS.ProcessEnv): Promise<Check> {
  const missing = (spec.setup_secrets ?? []).filter((n) => (env[n] ?? '') === '')
  if (missing.length > 0)
    return {
      name,
      status: 'fail',
      message: `${from}: setup_secrets ${missing.join(', ')} not set in ctxagent's environment`,
      hint: 'set them where ctxagent runs',
    }
  const unresolved: string[] = []
  for (const host of (spec.setup_hosts ?? []).filter((h) => !h.startsWith('*.'))) {
    try {
      await lookup(host)
    } catch {
      unresolved.push(host)
    }
  }
  const image = spec.image === undefined ? null : await describeImage(spec.image)
  if (image !== null && !image.ok) return { name, status: 'fail', message: `${from}: ${image.text}`, hint: 'see docs/environments.md#an-image' }
  const parts = [
    image?.text ?? null,
    spec.setup !== undefined ? `setup to ${(spec.setup_hosts ?? []).length} host(s), caching ${(spec.cache?.paths ?? []).join(', ')}` : 'no setup',
    spec.test !== undefined ? `test: ${spec.test}` : null,
  ].filter((p) => p !== null)
  if (unresolved.length > 0)
    return {
      name,
      status: 'warn',
      message: `${from}: setup_hosts ${unresolved.join(', ')} do not resolve here${image !== null ? `; ${image.text}` : ''}`,
      hint: 'check the names',
    }
  return { name, status: 'ok', message: `${from}: ${parts.join('; ')}` }
}

/** What the image is, read as a task would (its digest; nothing unpacked), or why it cannot be used. */
async function describeImage(path: string): Promise<{ ok: boolean; text: string }> {
  try {
    const source = await readImageSource(path, { bytes: MAX_IMAGE_BYTES, members: MAX_IMAGE_MEMBERS })
    if (source.kind === 'directory') return { ok: true, text: `image ${path} (a root file system directory)` }
    return { ok: true, text: `image ${path} (${source.kind} sha256:${source.digest.slice(0, 12)}, ${source.layers.length} layer(s))` }
  } catch (err) {
    return { ok: false, text: `image ${path}: ${(err as Error).message}` }
  }
}
