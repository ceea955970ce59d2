// zod/mini, as the config schema: one schema for a repository's `.ctxagent/environment.yml`
// and the operator's `environments.<key>` (docs/environments.md#the-file).
import * as z from 'zod/mini'
import { isEnvironmentKey } from './fixed.js'
import { isHostPattern } from './network.js'

const SCRIPT = 'must be a shell script (a string)'
const HOSTS = 'must be a list of host names or *.suffix patterns, like [registry.npmjs.org, "*.pypi.org"]'
const SECRET_NAMES = 'must be a list of environment variable names, like [NPM_TOKEN]'
const IMAGE = 'must be an absolute path on this host: a root file system directory, an OCI image layout directory, or a docker save archive'
const PATHS = 'must be a list of paths inside the repository, like [node_modules, .venv] (relative, no .., not .git)'

/** A path inside the checkout: relative, no `..` step, never `.git` or below it. */
export function isRepoPath(path: string): boolean {
  if (path === '' || path.startsWith('/') || path.includes('\0') || path.includes('\\')) return false
  const steps = path.split('/').filter((s) => s !== '' && s !== '.')
  return steps.length > 0 && !steps.includes('..') && steps[0] !== '.git'
}

const script = () => z.string({ error: SCRIPT }).check(z.refine((s: string) => s.trim() !== '', { error: SCRIPT }))
const repoPaths = () => z.array(z.string({ error: PATHS }).check(z.refine(isRepoPath, { error: PATHS })), { error: PATHS })

/** The keys of an environment; every one optional (an operator's entry may give only `test`). */
export const environmentSchema = z.strictObject(
  {
    setup: z.optional(script()),
    setup_hosts: z.optional(z.array(z.string({ error: HOSTS }).check(z.refine(isHostPattern, { error: HOSTS })), { error: HOSTS })),
    setup_secrets: z.optional(
      z.array(z.string({ error: SECRET_NAMES }).check(z.refine((n: string) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(n), { error: SECRET_NAMES })), {
        error: SECRET_NAMES,
      }),
    ),
    cache: z.optional(
      z.strictObject(
        {
          paths: repoPaths(),
          key: z._default(repoPaths(), []),
        },
        { error: 'must be a mapping with paths (and key): the paths setup makes and the files whose content keys them' },
      ),
    ),
    maintenance: z.optional(script()),
    test: z.optional(script()),
    image: z.optional(z.string({ error: IMAGE }).check(z.refine((p: string) => p.startsWith('/') && !p.includes('\0'), { error: IMAGE }))),
  },
  { error: 'must be a mapping of environment keys (setup, setup_hosts, setup_secrets, cache, maintenance, test, image)' },
)

export type EnvironmentSpec = z.infer<typeof environmentSchema>

/** config `environments:`: keyed by `owner/repo` or by a workspace's absolute path. */
export const environmentsSchema = z.record(
  z.string().check(z.refine(isEnvironmentKey, { error: 'keys must be owner/repo or an absolute path' })),
  environmentSchema,
  { error: 'must be a mapping of owner/repo (or a workspace path) to an environment' },
)
