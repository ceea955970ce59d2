import type { Config } from './schema.js'
import { shown, shownKey } from './shown.js'

/** Rules that span keys, or that a type alone cannot say. */
export function crossCheck(config: Config): string | null {
  const locks = config.locks
  if (locks.heartbeat_seconds >= locks.stale_after_seconds) {
    return `locks.heartbeat_seconds (${locks.heartbeat_seconds}) must be less than locks.stale_after_seconds (${locks.stale_after_seconds}), or every live agent would look dead`
  }
  if (locks.stale_after_remote_seconds !== null && locks.heartbeat_seconds >= locks.stale_after_remote_seconds) {
    return `locks.heartbeat_seconds (${locks.heartbeat_seconds}) must be less than locks.stale_after_remote_seconds (${locks.stale_after_remote_seconds}), or every live agent on another host would look dead`
  }
  if (config.context.base_dir !== null && config.context.base_dir.trim() === '')
    return 'context.base_dir must not be empty (leave it out for the per-user default, ~/.local/state/ctxagent)'
  const retention = config.context.retention
  if (retention.compress_after_days >= retention.delete_after_days) {
    return `context.retention.compress_after_days (${retention.compress_after_days}) must be less than context.retention.delete_after_days (${retention.delete_after_days}), or tasks would be deleted before they are ever gzipped`
  }
  const alerts = config.alerts
  if (alerts.disk_warning_gb >= alerts.disk_critical_gb) {
    return `alerts.disk_warning_gb (${alerts.disk_warning_gb}) must be less than alerts.disk_critical_gb (${alerts.disk_critical_gb}), or the warning could never be raised`
  }
  // 0 % free is never undercut: 0 turns that alert off, and both may be off.
  if (alerts.free_warning_percent !== 0 && alerts.free_warning_percent <= alerts.free_critical_percent) {
    return `alerts.free_warning_percent (${alerts.free_warning_percent}) must be more than alerts.free_critical_percent (${alerts.free_critical_percent}), or the warning could never be raised (0 turns the warning off)`
  }
  for (const name of Object.keys(config.users)) {
    const bad = badName(name)
    if (bad) return `users has a user name that ${bad} (${shown(JSON.stringify(name), 60)}); name each user as given to --user (default: the OS user)`
  }
  for (const [name, server] of Object.entries(config.mcp.servers)) {
    const bad = badName(name)
    if (bad) return `mcp.servers has a server name that ${bad} (${shown(JSON.stringify(name), 60)}); name each server: its tools are called <name>__<tool>`
    for (const variable of Object.keys(server.env)) {
      if (variable === '' || /[=\u0000]/.test(variable)) {
        return `mcp.servers.${shownKey(name)}.env has a variable name that is empty or holds '=' (${shown(JSON.stringify(variable), 60)}); give each variable a name like API_TOKEN`
      }
    }
  }
  return null
}

/** Why a user or server name can never be used, or null: `--user` is trimmed, printable and at most 200 characters. */
function badName(name: string): string | null {
  if (name.trim() === '') return 'is empty'
  if (/[\u0000-\u001f\u007f]/.test(name)) return 'holds control characters'
  if (name !== name.trim()) return 'starts or ends with spaces'
  if (name.length > 200) return 'is longer than 200 characters'
  return null
}
