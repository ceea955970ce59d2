import { Command } from 'commander'
import { Document } from 'yaml'
import type { Scalar } from 'yaml'
import { SECRET_KEYS, withoutSecrets } from '../config/secrets.js'
import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl } from '../command-env.js'
import { withEnv } from '../command-kit/shared.js'

const DATABASE_URL = 'fleet.database_url'

export function configCommand(): Command {
  return new Command('config')
    .description('check the configuration and print it as ctxagent sees it: file, defaults and environment, secrets hidden')
    .action(withEnv(showConfig))
}

/**
 * An invalid file never gets here: loading the context fails first with exit 2 and
 * the key path, which makes `ctxagent config` the way to check a file too.
 */
async function showConfig(ctx: CommandEnv): Promise<void> {
  const { config, secretsSet } = withoutSecrets(ctx.config)
  // The fleet's database may come from CTXAGENT_DATABASE_URL, which the file's key does not show: said where it is from, never what it is.
  const databaseFrom = fleetDatabaseUrl(ctx) === null ? null : ctx.env.CTXAGENT_DATABASE_URL ? 'CTXAGENT_DATABASE_URL' : 'file'
  if (databaseFrom !== null && !secretsSet.includes(DATABASE_URL)) secretsSet.push(DATABASE_URL)
  if (ctx.json) {
    ctx.io.json({
      source: ctx.configSource,
      base_dir: ctx.layout.base,
      base_dir_from: ctx.baseSource,
      secrets_set: secretsSet,
      database_url_from: databaseFrom,
      config,
    })
    return
  }
  // YAML in the shape of config.yaml, so that it can start one: secrets stay null
  // there (the environment fills them), with a comment saying whether one is set.
  const doc = new Document(config)
  for (const path of SECRET_KEYS) {
    const node = doc.getIn(path, true) as Scalar
    node.comment = secretsSet.includes(path.join('.')) ? ' set (hidden)' : ' not set'
  }
  if (databaseFrom !== null)
    (doc.getIn(['fleet', 'database_url'], true) as Scalar).comment = ` set (hidden), from ${databaseFrom === 'file' ? 'the config file' : databaseFrom}`
  for (const key of Object.keys(config.telemetry.headers)) (doc.getIn(['telemetry', 'headers', key], true) as Scalar).comment = ' set (hidden)'
  for (const [name, server] of Object.entries(config.mcp.servers)) {
    for (const key of Object.keys(server.env)) (doc.getIn(['mcp', 'servers', name, 'env', key], true) as Scalar).comment = ' set (hidden)'
  }
  doc.commentBefore = [
    ` ctxagent configuration, ${ctx.configSource === null ? 'defaults (no config file found)' : `from ${ctx.configSource}`}`,
    ` task tree: ${ctx.layout.base} (from ${ctx.baseSource})`,
  ].join('\n')
  ctx.io.out(doc.toString())
}
