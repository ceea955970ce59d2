// zod/mini: the same validation as zod's classic API through functions instead of
// methods, so that the bundle keeps only what is used (a command parses less code).
import * as z from 'zod/mini'
import { isDuration } from '../duration.js'
import { environmentsSchema } from './environment.js'
import { DEFAULT_LIMITS, DELIVER_MODES, PROVIDERS } from './fixed.js'
import { isHostPattern, NETWORK_MODES, parseCidr } from './network.js'
import { shown } from './shown.js'
import { isHttpUrl, isPostgresUrl } from './urls.js'

const POSITIVE_INT = 'must be a positive integer'
const NON_NEGATIVE_INT = 'must be a whole number of 0 or more'
const POSITIVE_NUMBER = 'must be a positive number'
const RATIO = 'must be a number greater than 0 and at most 1'
const DURATION = 'must be a duration such as 90s, 30m or 1h30m'
const PORT = 'must be a port number from 0 to 65535'
const SERVE_TOKEN = 'must be a string of at least 16 characters (a long random one: openssl rand -hex 32)'
const COMMAND_TIMEOUT = 'must be a whole number of seconds from 1 to 600'
const SANDBOX_USER = 'must be a user name or uid[:gid], like nobody or 1000:1000'
/** tools.sandbox_user: a user name, or uid[:gid]. */
export const isSandboxUser = (v: string): boolean => /^\d+(:\d+)?$/.test(v) || /^[A-Za-z_][A-Za-z0-9_.-]*\$?$/.test(v)

const positiveInt = () => z.int({ error: POSITIVE_INT }).check(z.positive({ error: POSITIVE_INT }))
const nonNegativeInt = () => z.int({ error: NON_NEGATIVE_INT }).check(z.gte(0, { error: NON_NEGATIVE_INT }))
const NICENESS = 'must be a whole number from 0 to 19 (nice steps)'
const niceness = () => z.int({ error: NICENESS }).check(z.gte(0, { error: NICENESS }), z.lte(19, { error: NICENESS }))
const positiveNumber = () => z.number({ error: POSITIVE_NUMBER }).check(z.positive({ error: POSITIVE_NUMBER }))
const PERCENT = 'must be a percentage from 0 to 100'
const percent = () => z.number({ error: PERCENT }).check(z.gte(0, { error: PERCENT }), z.lte(100, { error: PERCENT }))
const USD = 'must be an amount in USD (a number greater than 0)'
const usd = () => z.number({ error: USD }).check(z.positive({ error: USD }))
const TIMEZONE = 'must be an IANA time zone such as UTC or Europe/Berlin'
/** A time zone Intl knows (budgets.timezone). */
export const isTimeZone = (v: string): boolean => {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: v })
    return true
  } catch {
    return false
  }
}
const ratio = () => z.number({ error: RATIO }).check(z.gt(0, { error: RATIO }), z.lte(1, { error: RATIO }))
const text = () => z.string({ error: 'must be a string' })
const LABEL = 'must be a label name: 1 to 50 characters, no comma'
const labelName = () => z.string({ error: LABEL }).check(z.refine((v) => v.trim() !== '' && v.length <= 50 && !v.includes(','), { error: LABEL }))
const MAPPING = 'must be a mapping of keys'
const flag = () => z.boolean({ error: 'must be true or false' })
const absolutePath = () =>
  z.string({ error: 'must be an absolute path' }).check(z.refine((p: string) => p.startsWith('/'), { error: 'must be an absolute path' }))
const oneOf = <const T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: `must be ${values.slice(0, -1).join(', ')} or ${values.at(-1)}` })

// tools.network and mcp.servers.<name>.network (docs/security.md#the-network): false and true, the old switch, are none and proxy.
const NETWORK = 'must be none, proxy or host (false is none, true is proxy)'
const network = () =>
  z.pipe(
    z.union([z.boolean(), z.enum(NETWORK_MODES)], { error: NETWORK }),
    z.transform((v: boolean | (typeof NETWORK_MODES)[number]) => (v === true ? 'proxy' : v === false ? 'none' : v)),
  )
const ALLOWED_HOSTS = 'must be a list of host names, *.suffix patterns or IP addresses, like [registry.npmjs.org, "*.pypi.org"]'
const allowedHosts = () => z.array(z.string({ error: ALLOWED_HOSTS }).check(z.refine(isHostPattern, { error: ALLOWED_HOSTS })), { error: ALLOWED_HOSTS })
const ALLOWED_NETWORKS = 'must be a list of networks in CIDR form, like [10.1.2.3/32, "fd00:1::/64"]'
const allowedNetworks = () =>
  z.array(z.string({ error: ALLOWED_NETWORKS }).check(z.refine((v: string) => parseCidr(v) !== null, { error: ALLOWED_NETWORKS })), { error: ALLOWED_NETWORKS })

const withDefault = z._default
const orNull = <T extends z.core.SomeType>(schema: T) => z._default(z.nullable(schema), null)
// Every key has a default, so an absent section parses as {} (typed loosely: zod cannot see that generically).
const section = <T extends z.core.$ZodLooseShape>(shape: T) => z.prefault(z.strictObject(shape, { error: MAPPING }), {} as never)

/** The URL keys: each says what it expected, with an example, and what it got (user:password cut out). */
const httpUrl = (example: string) => {
  const error = (iss: { input?: unknown }) =>
    `must be an http(s) URL, like ${example}${typeof iss.input === 'string' ? ` (got '${shown(iss.input.replace(/\/\/[^/@\s]*@/, '//…@'), 80)}')` : ''}`
  return z.string({ error }).check(z.refine(isHttpUrl, { error }))
}

/** telemetry.headers: HTTP header names (RFC 9110 tokens) and values on one line. */
const HEADER_NAME = "must be HTTP header names (letters, digits and !#$%&'*+.^_`|~-)"
const HEADER_VALUE = 'must be a header value on one line'
const isHeaderName = (name: string) => /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$/.test(name)
const isHeaderValue = (value: string) => !/[\r\n\0]/.test(value)

const POSTGRES_URL = 'must be a PostgreSQL URL like postgres://user:password@db.example.com:5432/ctxagent'
const postgresUrl = () => z.string({ error: POSTGRES_URL }).check(z.refine(isPostgresUrl, { error: POSTGRES_URL }))

/** A duration as in the CLI (`90s`, `30m`, `1h30m`, or a number of seconds), kept as text and parsed where used. */
const duration = () => z.string({ error: DURATION }).check(z.refine((value: string) => isDuration(value), { error: DURATION }))

const BRANCH = 'must be a branch name template without spaces or ~^:?*[\\, like ctxagent/<key>-<uuid8>'

/** `users.<name>` (docs/contract.md §12.7): what one user's tasks change of the defaults. */
const userSettings = () =>
  z.strictObject(
    {
      llm: z.optional(
        z.strictObject(
          {
            provider: z.optional(oneOf(PROVIDERS)),
            model: z.optional(text()),
            context_length: z.optional(positiveInt()),
          },
          { error: 'must be a mapping of keys: provider, model, context_length' },
        ),
      ),
      run: z.optional(
        z.strictObject(
          { max_turns: z.optional(positiveInt()), max_tokens: z.optional(positiveInt()), max_cost_usd: z.optional(usd()) },
          { error: 'must be a mapping of keys: max_turns, max_tokens, max_cost_usd' },
        ),
      ),
      system_prompt_append: z.optional(text()),
      // docs/running.md#budgets: this user's own caps over budgets.user_daily_usd / user_monthly_usd (null: none).
      budgets: z.optional(
        z.strictObject(
          { user_daily_usd: z.optional(z.nullable(usd())), user_monthly_usd: z.optional(z.nullable(usd())) },
          { error: 'must be a mapping of keys: user_daily_usd, user_monthly_usd' },
        ),
      ),
    },
    { error: 'must be a mapping of settings: llm, run, system_prompt_append, budgets' },
  )

/** `pricing.<model>`: USD per million tokens, for the optional cost in view and stats. */
const PRICE = 'must be a price in USD per million tokens (a number of 0 or more)'
const price = () => z.number({ error: PRICE }).check(z.gte(0, { error: PRICE }))
const modelPrice = () =>
  z.strictObject(
    {
      prompt: price(),
      completion: price(),
      cached: z.optional(price()),
      cache_write: z.optional(price()),
    },
    { error: 'must be a mapping of prompt, completion and (optional) cached and cache_write: USD per million tokens' },
  )

const mcpServer = () =>
  z.strictObject(
    {
      command: z.string({ error: (iss) => (iss.input === undefined ? 'is missing: the program that starts the server, like npx' : 'must be a string') }),
      args: withDefault(z.array(text(), { error: 'must be a list of strings, like [-y, some-package]' }), []),
      env: withDefault(
        z.record(z.string(), z.string({ error: 'must be a string (put numbers and true/false in quotes)' }), {
          error: 'must be a mapping of variable names to values',
        }),
        {},
      ),
      cwd: orNull(text()),
      enabled: withDefault(flag(), true),
      timeout_seconds: withDefault(positiveNumber(), 60),
      // A server started by a run gets run_command's sandbox unless this says none (docs/security.md).
      sandbox: withDefault(oneOf(['bwrap', 'none']), 'bwrap'),
      // The network inside its sandbox (a server that calls an API needs it): none, proxy or host, as tools.network.
      network: withDefault(network(), 'none'),
      // Hosts its proxy lets through (null: tools.allowed_hosts).
      allowed_hosts: orNull(allowedHosts()),
    },
    { error: 'must be a mapping of settings with at least command (and args, env, cwd, enabled, timeout_seconds)' },
  )

const endpointShape = (baseUrl: string, model: string, contextLength: number) => ({
  base_url: withDefault(httpUrl(baseUrl), baseUrl),
  api_key: orNull(text()),
  model: withDefault(text(), model),
  context_length: withDefault(positiveInt(), contextLength),
  timeout_seconds: withDefault(positiveNumber(), 120),
  max_retries: withDefault(nonNegativeInt(), 3),
})
const endpoint = (baseUrl: string, model: string, contextLength: number) => section(endpointShape(baseUrl, model, contextLength))

/**
 * Each top-level section's schema, built the first time it is needed
 * (docs/development.md#start-up): building all of them takes zod a large part of a short
 * command's start, and a config file sets a few sections; the others are their defaults.
 */
const sections = {
  context: () =>
    section({
      base_dir: orNull(text()),
      durability: withDefault(oneOf(['flush', 'fsync']), 'flush'),
      max_memory_messages: withDefault(positiveInt(), 20),
      compression: section({
        threshold: withDefault(ratio(), 0.7),
        token_threshold: orNull(positiveInt()),
        keep_recent: withDefault(positiveInt(), 10),
        min_to_compress: withDefault(positiveInt(), 5),
        max_rounds: withDefault(positiveInt(), 100),
        // max_tokens of a summary request (compaction and final), not the turn's llm.max_output_tokens.
        summary_max_tokens: withDefault(positiveInt(), 1500),
      }),
      // The boundary moves in steps of step_rounds rounds (1: every round), so that a provider's prefix cache serves the rest.
      prune: section({
        protected_turns: withDefault(nonNegativeInt(), 3),
        protected_tool_rounds: withDefault(positiveInt(), 3),
        step_rounds: withDefault(positiveInt(), 12),
      }),
      // Tool outputs over threshold_bytes are stored once in blobs/ (docs/contract.md §5); a fresh one over max_inline_bytes is sent as head + tail.
      blobs: section({ threshold_bytes: withDefault(positiveInt(), 8 * 1024), max_inline_bytes: withDefault(positiveInt(), 64 * 1024) }),
      // across_users: a task may inherit from another user's (docs/delivery.md#the-review-loop); off, a user's task reads only that user's findings.
      inheritance: section({
        enabled: withDefault(flag(), true),
        max_summary_tokens: withDefault(positiveInt(), 4000),
        across_users: withDefault(flag(), false),
      }),
      retention: section({ compress_after_days: withDefault(positiveNumber(), 7), delete_after_days: withDefault(positiveNumber(), 30) }),
    }),
  locks: () =>
    section({
      heartbeat_seconds: withDefault(positiveNumber(), 30),
      stale_after_seconds: withDefault(positiveNumber(), 60),
      stale_after_remote_seconds: orNull(positiveNumber()),
    }),
  llm: () =>
    section({
      provider: withDefault(oneOf(PROVIDERS), 'openai'),
      // Every request carries max_tokens: a turn this many, a summary its own smaller budget.
      max_output_tokens: withDefault(positiveInt(), 4096),
      // The longest wait a server may ask for between retries (Retry-After), in seconds.
      max_retry_wait: withDefault(positiveNumber(), 60),
      // The largest response body read, in bytes (a chat completion is far smaller).
      max_response_bytes: withDefault(positiveInt(), 32 * 1024 * 1024),
      openai: endpoint('https://api.openai.com/v1', 'gpt-4o', 128_000),
      // Anthropic's Messages API (docs/contract.md §5's `anthropic` provider): a long answer streams for minutes, hence the longer timeout.
      anthropic: section({
        ...endpointShape('https://api.anthropic.com', 'claude-sonnet-5-5', 200_000),
        timeout_seconds: withDefault(positiveNumber(), 300),
        // Server-sent events (false: one JSON answer, for a proxy that cannot stream).
        stream: withDefault(flag(), true),
      }),
      ollama: endpoint('http://localhost:11434/v1', 'llama3.1', 8_192),
      replay: section({
        // A recorded task to play back: its uuid (or prefix) or a messages.jsonl path.
        from: orNull(text()),
        context_length: withDefault(positiveInt(), 8_192),
      }),
    }),
  run: () =>
    section({
      max_turns: withDefault(positiveInt(), 100),
      max_tokens: orNull(positiveInt()),
      timeout: orNull(duration()),
      system_prompt_append: orNull(text()),
      max_answer_chars: withDefault(positiveInt(), 200_000),
      // docs/running.md#budgets: a task's spend cap in USD across resumes (pricing.<model>); null: none.
      max_cost_usd: orNull(usd()),
    }),
  // docs/running.md#budgets: spend caps in USD that pause tasks before the request that would pass them.
  budgets: () =>
    section({
      user_daily_usd: orNull(usd()),
      user_monthly_usd: orNull(usd()),
      fleet_daily_usd: orNull(usd()),
      // Days and months of the caps begin at midnight here.
      timezone: withDefault(z.string({ error: TIMEZONE }).check(z.refine(isTimeZone, { error: TIMEZONE })), 'UTC'),
      // stats --check warns from this share of a cap, and is critical at the cap.
      warn_at: withDefault(ratio(), 0.8),
    }),
  tools: () =>
    section({
      shell: withDefault(flag(), false),
      command_timeout_seconds: withDefault(
        z.int({ error: COMMAND_TIMEOUT }).check(z.positive({ error: COMMAND_TIMEOUT }), z.lte(600, { error: COMMAND_TIMEOUT })),
        120,
      ),
      max_calls_per_reply: withDefault(positiveInt(), 32),
      // run_command's sandbox: bwrap, or none (an explicit opt-out; see docs/security.md).
      sandbox: withDefault(oneOf(['bwrap', 'none']), 'bwrap'),
      // none (default), proxy (only an HTTP(S) proxy that refuses this host and private networks) or host; docs/security.md#the-network.
      network: withDefault(network(), 'none'),
      // With network: proxy, the only hosts reached (null: any public one); *.suffix for subdomains.
      allowed_hosts: orNull(allowedHosts()),
      // Private networks the proxy reaches all the same (a package mirror on the LAN), in CIDR form.
      allowed_networks: withDefault(allowedNetworks(), []),
      sandbox_read_only: withDefault(
        z.array(absolutePath(), { error: 'must be a list of absolute paths (directories a sandboxed command may read, e.g. a toolchain in $HOME)' }),
        [],
      ),
      // Who commands run as when ctxagent is root (a user name or uid[:gid]; never root). See docs/security.md.
      sandbox_user: orNull(z.string({ error: SANDBOX_USER }).check(z.refine(isSandboxUser, { error: SANDBOX_USER }))),
      // Per command (rlimits through prlimit), with or without bwrap.
      limits: section({
        memory_mb: withDefault(positiveInt(), DEFAULT_LIMITS.memory_mb),
        processes: withDefault(positiveInt(), DEFAULT_LIMITS.processes),
        file_size_mb: withDefault(positiveInt(), DEFAULT_LIMITS.file_size_mb),
        open_files: withDefault(positiveInt(), DEFAULT_LIMITS.open_files),
        cpu_seconds: withDefault(positiveInt(), DEFAULT_LIMITS.cpu_seconds),
      }),
    }),
  pricing: () =>
    withDefault(
      z.record(z.string(), modelPrice(), {
        error: 'must be a mapping of model names to prices (prompt, completion, cached, cache_write: USD per million tokens)',
      }),
      {},
    ),
  users: () =>
    withDefault(z.record(z.string(), userSettings(), { error: 'must be a mapping of user names to settings (llm, run, system_prompt_append, budgets)' }), {}),
  mcp: () =>
    section({
      servers: withDefault(
        z.record(z.string(), mcpServer(), { error: 'must be a mapping of server names to settings (command, args, env, cwd, enabled, timeout_seconds)' }),
        {},
      ),
      max_tools: withDefault(positiveInt(), 128),
      max_result_chars: withDefault(positiveInt(), 100_000),
    }),
  github: () =>
    section({
      api_url: withDefault(httpUrl('https://github.example.com/api/v3'), 'https://api.github.com'),
      token: orNull(text()),
      bot_name: orNull(text()),
    }),
  gitlab: () => section({ url: withDefault(httpUrl('https://gitlab.example.com'), 'https://gitlab.com'), token: orNull(text()), bot_name: orNull(text()) }),
  comments: () => section({ min_interval_seconds: withDefault(positiveNumber(), 30) }),
  chat: () =>
    section({
      wait_interval_seconds: withDefault(positiveNumber(), 5),
      soft_timeout_minutes: withDefault(positiveNumber(), 10),
      hard_timeout_minutes: withDefault(positiveNumber(), 15),
      end_grace_seconds: withDefault(positiveNumber(), 60),
    }),
  fleet: () =>
    section({
      // docs/contract.md §14.1: the index (and the fleet's queue) in PostgreSQL; CTXAGENT_DATABASE_URL overrides it.
      database_url: orNull(postgresUrl()),
      // How often an idle worker looks at the queue besides being woken by NOTIFY.
      poll_seconds: withDefault(positiveNumber(), 5),
      // docs/contract.md §14.3: a task whose worker died is paused and its resume queued (resume), or failed as §4 says (fail).
      recovery: withDefault(oneOf(['resume', 'fail']), 'resume'),
      max_attempts: withDefault(positiveInt(), 3),
      // Where `enqueue --repo` jobs are cloned, one directory per task: on the shared mount, outside the task tree.
      workspaces_dir: orNull(text()),
      // docs/contract.md §14.4: a task paused by the LLM side (unreachable, 5xx, 429, timeout) is run again after
      // base_seconds × 2^(attempt-1) (with jitter, at most max_seconds), until max_attempts runs.
      retry: section({
        base_seconds: withDefault(positiveNumber(), 30),
        max_seconds: withDefault(positiveNumber(), 1800),
        max_attempts: withDefault(positiveInt(), 8),
        // A job waiting out provider usage limits (no attempt spent) waits at most this long in all, then fails.
        max_wait_hours: withDefault(positiveNumber(), 24),
      }),
      // enqueue --key: a key is kept this long after its job ended done (a late cron run returns that job).
      key_retention_hours: withDefault(positiveNumber(), 24),
      // At most per_user running tasks of one user fleet-wide (null: no limit).
      limits: section({ per_user: orNull(positiveInt()) }),
      // Finished job rows and dead worker rows older than this are deleted by cleanup.
      retention_days: withDefault(positiveNumber(), 30),
      // docs/contract.md §14.5: a direct connection (not through a pooler in transaction mode) used only for LISTEN; default: the database URL.
      listen_url: orNull(postgresUrl()),
      // How many nice(1) steps below its worker an agent runs (0: the same): the worker's claims and heartbeats go first on a busy host.
      agent_niceness: withDefault(niceness(), 5),
    }),
  poll: () =>
    section({
      // docs/contract.md §14.2: the labels `poll` moves on each issue as its task goes on.
      labels: section({
        processing: withDefault(labelName(), 'ctxagent:processing'),
        done: withDefault(labelName(), 'ctxagent:done'),
        paused: withDefault(labelName(), 'ctxagent:paused'),
        failed: withDefault(labelName(), 'ctxagent:failed'),
      }),
    }),
  // Delivery of a finished task's change (docs/delivery.md): a branch, or a branch and a pull/merge request.
  deliver: () =>
    section({
      mode: withDefault(oneOf(DELIVER_MODES), 'none'),
      // <key> (the issue's number, or the task id), <uuid8> and <uuid> are filled in.
      branch: withDefault(
        z.string({ error: BRANCH }).check(z.refine((v) => v.trim() !== '' && !/[\s~^:?*[\\]/.test(v), { error: BRANCH })),
        'ctxagent/<key>-<uuid8>',
      ),
      // Author and committer of every delivered commit (never the host's git identity); null: the bot name and a no-reply address.
      author: section({ name: orNull(text()), email: orNull(text()) }),
      // The branch a PR/MR is opened against; null: the branch the task started from.
      base: orNull(text()),
      draft: withDefault(flag(), false),
      labels: withDefault(z.array(labelName(), { error: 'must be a list of label names' }), []),
      // Paths (globs, matched on the path and on its file name) never delivered.
      exclude: withDefault(z.array(text(), { error: 'must be a list of globs, like .env*' }), ['.env*', '*.pem', 'id_*']),
      // A file larger than this is not delivered (null: no limit).
      max_file_bytes: orNull(positiveInt()),
      // Follow-up tasks on one PR/MR at most (the review loop, docs/delivery.md#the-review-loop).
      max_rounds: withDefault(positiveInt(), 5),
    }),
  sources: () => section({ trusted: withDefault(oneOf(['write', 'any']), 'write') }),
  alerts: () =>
    section({
      disk_warning_gb: withDefault(positiveNumber(), 10),
      disk_critical_gb: withDefault(positiveNumber(), 50),
      failure_rate: withDefault(ratio(), 0.1),
      max_running_tasks: withDefault(positiveInt(), 100),
      long_running_hours: withDefault(positiveNumber(), 6),
      no_progress_minutes: withDefault(positiveNumber(), 30),
      free_warning_percent: withDefault(percent(), 10),
      free_critical_percent: withDefault(percent(), 2),
      // In a fleet: the oldest waiting job older than this is a warning.
      queue_wait_minutes: withDefault(positiveNumber(), 30),
    }),
  // docs/contract.md §15: `ctxagent serve`; any host but loopback needs the token (CTXAGENT_SERVE_TOKEN overrides it).
  serve: () =>
    section({
      host: withDefault(text(), '127.0.0.1'),
      port: withDefault(z.int({ error: PORT }).check(z.gte(0, { error: PORT }), z.lte(65535, { error: PORT })), 7878),
      token: orNull(z.string({ error: SERVE_TOKEN }).check(z.minLength(16, { error: SERVE_TOKEN }))),
      // Live (SSE) followers of one running task, and of all together; past either: 503 (docs/serve.md#live-followers).
      max_followers_per_task: withDefault(positiveInt(), 50),
      max_followers: withDefault(positiveInt(), 500),
      // The task list and the fleet page refresh themselves this often, quietly (0: never; docs/serve.md#the-page).
      refresh_seconds: withDefault(nonNegativeInt(), 15),
      // The page's address as others reach it (a pull request links its task there: docs/delivery.md#the-pull-request); null: no link.
      public_url: orNull(httpUrl('https://ctxagent.example.com')),
    }),
  // docs/contract.md §15: OpenTelemetry traces of run and workers, off unless an endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT too).
  telemetry: () =>
    section({
      otlp_endpoint: orNull(httpUrl('http://otel-collector.example.com:4318')),
      // Message content on spans (masked); off: only sizes, models and token counts.
      content: withDefault(flag(), false),
      service_name: withDefault(text(), 'ctxagent'),
      // Headers sent with every export (an OTLP receiver's auth: `Authorization: Bearer …`); secrets, shown as set, never by value.
      headers: withDefault(
        z.record(
          z.string().check(z.refine(isHeaderName, { error: HEADER_NAME })),
          z.string({ error: HEADER_VALUE }).check(z.refine(isHeaderValue, { error: HEADER_VALUE })),
          { error: 'must be a mapping of HTTP header names to values' },
        ),
        {},
      ),
    }),
  // Repository environments (docs/environments.md): keyed by owner/repo or a workspace's path; wins over the repository's own file.
  environments: () => withDefault(environmentsSchema, {}),
  // The environments' cache: cleanup removes results unused for max_age_days, then the least recently used past max_gb.
  environment_cache: () => section({ max_age_days: withDefault(positiveNumber(), 14), max_gb: withDefault(positiveNumber(), 20) }),
}

type Sections = typeof sections
export type ConfigSection = keyof Sections
/** A config: every section, each parsed (or defaulted) by its schema. */
export type Config = { [K in ConfigSection]: z.output<ReturnType<Sections[K]>> }
/** The top-level keys, in the schema's order (the order of a parsed config's keys). */
export const CONFIG_SECTIONS = Object.keys(sections) as ConfigSection[]

const built = new Map<ConfigSection, z.ZodMiniType>()
function sectionSchema(name: ConfigSection): z.ZodMiniType {
  let schema = built.get(name)
  if (schema === undefined) {
    schema = sections[name]() as z.ZodMiniType
    built.set(name, schema)
  }
  return schema
}

/**
 * The config file's schema over `names` (all of them: the whole file's), a strict mapping as
 * the file is. With fewer names it validates a file that sets only those sections exactly as
 * the whole schema would (the same schema per section; src/config/validate.ts).
 */
export function configSchemaOf(names: readonly ConfigSection[] = CONFIG_SECTIONS): z.ZodMiniType<Config> {
  return z.strictObject(Object.fromEntries(names.map((name) => [name, sectionSchema(name)])), { error: MAPPING }) as unknown as z.ZodMiniType<Config>
}
