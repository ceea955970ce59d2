import { Command } from 'commander'
import { Document } from 'yaml'
import type { Scalar } from 'yaml'
import { SECRET_KEYS, withoutSecrets } from '../config/schema.js'
import type { CommandEnv } from '../command-env.js'
import { withEnv } from './shared.js'

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
  if (ctx.json) {
    ctx.io.json({ source: ctx.configSource, base_dir: ctx.layout.base, base_dir_from: ctx.baseSource, secrets_set: secretsSet, config })
    return
  }
  // YAML in the shape of config.yaml, so that it can start one: secrets stay null
  // there (the environment fills them), with a comment saying whether one is set.
  const doc = new Document(config)
  for (const path of SECRET_KEYS) {
    const node = doc.getIn(path, true) as Scalar
    node.comment = secretsSet.includes(path.join('.')) ? ' set (hidden)' : ' not set'
  }
  for (const [name, server] of Object.entries(config.mcp.servers)) {
    for (const key of Object.keys(server.env)) (doc.getIn(['mcp', 'servers', name, 'env', key], true) as Scalar).comment = ' set (hidden)'
  }
  doc.commentBefore = [
    ` ctxagent configuration, ${ctx.configSource === null ? 'defaults (no config file found)' : `from ${ctx.configSource}`}`,
    ` task tree: ${ctx.layout.base} (from ${ctx.baseSource})`,
  ].join('\n')
  ctx.io.out(doc.toString())
}
