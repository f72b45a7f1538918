// Small shared pieces. Everything renders data as text nodes: no HTML from
// data ever reaches the DOM as markup.
import type { ComponentChildren } from 'preact';
import type { Json } from './api';
import { ApiError } from './api';
import { pretty } from './fmt';

const statusText: Record<string, [string, string]> = {
  ok: ['✓', 'ok'],
  success: ['✓', 'ok'],
  completed: ['✓', 'completed'],
  done: ['✓', 'completed'],
  allow: ['✓', 'allowed'],
  error: ['✖', 'error'],
  failed: ['✖', 'failed'],
  denied: ['⊘', 'denied'],
  deny: ['⊘', 'denied'],
  needs_approval: ['⚑', 'needs approval'],
  approved: ['✔', 'approved'],
  in_doubt: ['⚠', 'in doubt'],
  pending: ['◷', 'pending'],
  running: ['▶', 'running'],
  cancelled: ['■', 'cancelled'],
  withdrawn: ['■', 'withdrawn'],
  expired: ['◷', 'expired'],
  invalid: ['✖', 'invalid'],
  unknown: ['?', 'unknown'],
};

/** statusLabel gives the icon and words for a status. */
export function statusLabel(s: string | undefined): [string, string] {
  const k = (s || 'unknown').toLowerCase();
  return statusText[k] ?? ['•', k.replace(/_/g, ' ')];
}

/** statusClass maps a status to one of a few CSS classes (color is extra). */
export function statusClass(s: string | undefined): string {
  const k = (s || '').toLowerCase();
  if (['ok', 'success', 'completed', 'done', 'allow', 'approved'].includes(k)) return 'st-ok';
  if (['error', 'failed', 'invalid'].includes(k)) return 'st-error';
  if (['denied', 'deny'].includes(k)) return 'st-denied';
  if (['needs_approval', 'pending', 'in_doubt', 'expired'].includes(k)) return 'st-warn';
  if (k === 'running') return 'st-run';
  return 'st-none';
}

/** Status shows a status as an icon and words, never by color alone. */
export function Status({ s }: { s: string | undefined }) {
  const [icon, text] = statusLabel(s);
  return (
    <span class={'status ' + statusClass(s)}>
      <span aria-hidden="true">{icon}</span> {text}
    </span>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="loading" role="status">
      Loading {what}…
    </p>
  );
}

export function ErrorBox({ err, what }: { err: unknown; what?: string }) {
  const e = err as ApiError;
  const code = e instanceof ApiError ? e.code : 'ERROR';
  return (
    <div class="errorbox" role="alert">
      <strong>
        <span aria-hidden="true">✖ </span>
        {what ? `Could not load ${what}` : 'Error'} ({code})
      </strong>
      <p>{String(e?.message ?? err)}</p>
    </div>
  );
}

/** JsonBlock shows a JSON value as preformatted text. */
export function JsonBlock({ value, label }: { value: Json | undefined; label?: string }) {
  return (
    <pre class="json" tabIndex={0} aria-label={label}>
      {pretty(value)}
    </pre>
  );
}

export function Section({ title, children, id }: { title: string; children: ComponentChildren; id?: string }) {
  return (
    <section class="panel" aria-labelledby={id ? id + '-h' : undefined}>
      <h2 id={id ? id + '-h' : undefined}>{title}</h2>
      {children}
    </section>
  );
}
