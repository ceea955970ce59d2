/**
 * The page's only stylesheet and script, served from this server (the CSP allows 'self'
 * and nothing inline). The script builds new transcript entries with textContent:
 * what a task wrote is never parsed as HTML on the client either.
 */
export const STYLE = `
:root{--fg:#1d2330;--muted:#667085;--line:#d9dee7;--bg:#f7f8fa;--card:#fff;--accent:#2457c5;--ok:#137a3a;--bad:#b42318;--warn:#a15c00;--run:#0b6b8f}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;flex-wrap:wrap;gap:8px 24px;align-items:center;padding:10px 20px;background:#141a26;color:#fff}header nav{display:flex;flex-wrap:wrap;gap:14px}header a{color:#c9d4ea;text-decoration:none}
header a[aria-current]{color:#fff;border-bottom:2px solid #7aa2ff}header .who{margin-left:auto;color:#c9d4ea}header button{font-size:12px}
main{padding:16px 20px;max-width:1400px;overflow-wrap:anywhere}h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:20px 0 8px}h2 small{font-weight:normal;color:var(--muted)}
a{color:var(--accent)}code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line)}th,td{padding:5px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:#eef1f6;font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.03em;color:#475467}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.task{max-width:420px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}.scroll td,.scroll th{overflow-wrap:normal}
.status{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;background:#e8ecf3}.s-completed{background:#dcf3e4;color:var(--ok)}
.s-failed,.s-timeout{background:#fde4e1;color:var(--bad)}.s-paused{background:#fff0d6;color:var(--warn)}.s-processing,.s-initializing{background:#daf0f7;color:var(--run)}
.tabs,.pages{display:flex;gap:12px;margin:8px 0}.tabs a[aria-current]{font-weight:700;text-decoration:none;color:var(--fg)}
.filters{display:flex;gap:12px;align-items:end;flex-wrap:wrap;margin:8px 0}.filters label{display:flex;flex-direction:column;font-size:12px;color:var(--muted)}
.muted{color:var(--muted)}.notice{background:#eef4ff;border:1px solid #b8cdf8;padding:8px 10px;border-radius:6px}.error{color:var(--bad)}
.facts{display:flex;gap:40px;flex-wrap:wrap;background:var(--card);border:1px solid var(--line);padding:10px 14px;border-radius:6px}
dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:2px 14px;margin:0}dt{color:var(--muted)}dd{margin:0;min-width:0}
.actions{display:flex;gap:10px;flex-wrap:wrap;align-items:start;margin:12px 0}.action{display:flex;gap:6px;align-items:center}.action textarea{width:320px;max-width:100%}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;background:#f2f4f7;padding:6px 8px;border-radius:4px}
.statement,.final{background:var(--card);border:1px solid var(--line)}
.transcript{list-style:none;padding:0;margin:0}.msg{background:var(--card);border:1px solid var(--line);border-left:4px solid #98a2b3;border-radius:4px;padding:6px 10px;margin:6px 0}
.m-assistant{border-left-color:#2457c5}.m-user{border-left-color:#137a3a}.m-tool{border-left-color:#a15c00}.m-system{border-left-color:#7a5af8}
.msg.summarized{opacity:.6}.seq{color:var(--muted);font-size:12px}.role{font-weight:600}.mark{font-size:11px;color:var(--muted);border:1px solid var(--line);padding:0 4px;border-radius:6px}
details summary{cursor:pointer;color:#344054}.call summary code{font-weight:600}
.compaction{margin:8px 0;padding:6px 10px;border:1px dashed #7a5af8;background:#f4f1ff;border-radius:4px}
.live{color:var(--run);font-size:12px}.live.ended{color:var(--muted)}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(420px,100%),1fr));gap:16px}.grid>*{min-width:0}.grid>.wide{grid-column:1/-1}.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:10px 14px;min-width:0}
.card h2{margin-top:0}svg{max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#344054}svg.labelled{max-width:440px;display:block}
.o-merged{background:#dcf3e4;color:var(--ok)}.o-closed{background:#fde4e1;color:var(--bad)}.pair{margin:4px 0 8px}
.login{max-width:360px;display:flex;flex-direction:column;gap:10px}.inline{display:inline}
@media (max-width:600px){header,main{padding-left:10px;padding-right:10px}.facts{gap:12px 24px}}
@media (max-width:600px){table.stack,table.stack tbody,table.stack tr,table.stack td{display:block;width:100%}table.stack thead{display:none}table.stack{border:0;background:none}
table.stack tr{background:var(--card);border:1px solid var(--line);border-radius:6px;margin:0 0 8px;padding:4px 0}
table.stack td{display:grid;grid-template-columns:6.5em minmax(0,1fr);gap:8px;border:0;padding:2px 10px;text-align:left;max-width:none;white-space:normal;overflow-wrap:anywhere}
table.stack td::before{content:attr(data-label);color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.03em;overflow-wrap:normal}
table.stack td>*{justify-self:start}table.stack td:not([data-label])::before{content:none}.scroll:has(table.stack){overflow-x:visible}}
`

/**
 * The live script's one renderer: a MessageView (message-view.ts), as the server's
 * messageItem (task-page.ts) renders it, placed as it is given (`el` builds an element
 * with textContent). Apart so that a test can run it against the server's rendering.
 */
export const RENDER_MESSAGE = `function renderMessage(v) {
    function text(s) { return document.createTextNode(s) }
    function details(cls, summary, body) {
      var d = el('details', cls)
      d.appendChild(summary)
      d.appendChild(el('pre', '', body))
      return d
    }
    var item = el('li', v.classes)
    item.appendChild(el('span', 'seq', '#' + (v.seq === null ? '?' : String(v.seq))))
    item.appendChild(text(' '))
    item.appendChild(el('span', 'role r-' + v.kind, v.role))
    if (v.tool !== null) { item.appendChild(text(' ')); item.appendChild(el('code', '', v.tool)) }
    if (v.marks.length > 0) { item.appendChild(text(' ')); item.appendChild(el('span', 'mark', v.marks.join(' '))) }
    if (v.result !== null) item.appendChild(details('', el('summary', '', v.result.summary), v.result.text))
    else if (v.text !== '') item.appendChild(el('pre', '', v.text))
    v.calls.forEach(function (c) {
      var summary = el('summary', '')
      summary.appendChild(text('→ '))
      summary.appendChild(el('code', '', c.name))
      if (c.about !== null) summary.appendChild(text(' ' + c.about))
      item.appendChild(details('call', summary, c.args))
    })
    return item
  }`

export const SCRIPT = `'use strict'
;(function () {
  var live = document.getElementById('live')
  var list = document.getElementById('transcript')
  if (!live || !list || !window.EventSource) return
  var url = '/tasks/' + encodeURIComponent(live.dataset.uuid) + '/events?offset=' + encodeURIComponent(live.dataset.offset) + '&after=' + encodeURIComponent(live.dataset.after)
  var source = new EventSource(url)
  function el(tag, cls, text) {
    var node = document.createElement(tag)
    if (cls) node.className = cls
    if (text !== undefined) node.textContent = text
    return node
  }
  ${RENDER_MESSAGE}
  source.onmessage = function (event) {
    var v
    try { v = JSON.parse(event.data) } catch (e) { return }
    list.appendChild(renderMessage(v))
  }
  source.addEventListener('end', function (event) {
    live.textContent = 'the task left running/: it is now ' + event.data + ' (reload for its final state)'
    live.className = 'live ended'
    source.close()
  })
})()
;(function () {
  // The task list and the fleet page: fetched again every data-refresh seconds, what <main> shows
  // replaced by the server's own rendering of it; never while the tab is hidden or something in
  // <main> has the focus (a filter being typed, a comment being written).
  var main = document.querySelector('main[data-refresh]')
  var seconds = main ? Number(main.getAttribute('data-refresh')) : 0
  if (!main || !(seconds > 0) || !window.fetch || !window.DOMParser) return
  setInterval(function () {
    var active = document.activeElement
    if (document.hidden || (active && active !== document.body && main.contains(active))) return
    fetch(location.href, { credentials: 'same-origin', headers: { accept: 'text/html' } }).then(function (res) {
      return res.ok ? res.text() : null
    }).then(function (text) {
      if (text === null) return
      var next = new DOMParser().parseFromString(text, 'text/html').querySelector('main[data-refresh]')
      if (next) main.replaceChildren.apply(main, Array.prototype.slice.call(next.childNodes))
    }).catch(function () {})
  }, seconds * 1000)
})()
`
