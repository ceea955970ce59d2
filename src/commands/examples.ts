/**
 * Examples shown at the end of each command's --help (as gh does). Commands written
 * since carry their own with addHelpText; these are for the ones that did not.
 */
export const EXAMPLES: Record<string, string[]> = {
  run: [
    'ctxagent run --task "The CSV export drops the last row; fix it" --workspace ~/src/shop',
    'ctxagent run --task-file issue.md --task-id shop-412 --allow-shell --max-turns 60',
    'ctxagent run --github acme/shop#42',
    'ctxagent run --resume last                        continue the newest task',
    'ctxagent run --resume 550e8400 --max-turns 150    continue a task stopped by its budget',
  ],
  view: [
    'ctxagent view last',
    'ctxagent view 550e8400 --tools --limit 5',
    'ctxagent view 550e8400 --follow',
    'ctxagent view 550e8400 --messages --json | jq .content',
  ],
  stats: ['ctxagent stats', 'ctxagent stats --user alice --from 2024-01-01 --json', 'ctxagent stats --check    (a monitoring plugin: exit 0, 1, 2, 3)'],
  cleanup: ['ctxagent cleanup --dry-run', 'ctxagent cleanup --compress-after 2d --delete-after 90d', 'ctxagent cleanup --schedule "0 3 * * *"'],
  compress: ['ctxagent compress 550e8400 --dry-run', 'ctxagent compress 550e8400 --extractive'],
  pause: ['ctxagent pause 550e8400', 'ctxagent pause last --wait 5m'],
  comment: ['ctxagent comment 550e8400 "use the v2 API, not v1"'],
  chat: [
    'ctxagent chat 550e8400                 type a line, read the answer',
    'ctxagent chat 550e8400 --send "and the tests?"',
    'ctxagent chat 550e8400 --end',
  ],
  'watch-locks': ['ctxagent watch-locks --once --json      from cron', 'ctxagent watch-locks --interval 2m', 'ctxagent watch-locks --once --stale-after 2m'],
  unlock: ['ctxagent unlock 550e8400', 'ctxagent unlock 550e8400 --force      only when you know its agent is dead'],
  reindex: ['ctxagent reindex'],
  config: ['ctxagent config', 'ctxagent config --config /etc/ctxagent/config.yaml', 'ctxagent config --json | jq .base_dir'],
  demo: ['ctxagent demo', 'ctxagent demo --home /tmp/demo-tree      keep the task tree'],
}

export function examplesText(name: string): string | null {
  const lines = EXAMPLES[name]
  return lines ? `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}` : null
}
