// Cancel a running run (cluster mode, for callers whose role may cancel):
// the orchestrator closes the open step, withdraws a pending approval and
// records the end; the page sees it arrive on the chain.
import { useState } from 'preact/hooks';
import { cancelRun } from './api';
import { ErrorBox } from './common';

export function CancelRun({ id, status }: { id: string; status: string }) {
  const [open, setOpen] = useState(false);
  const [reason, setReason] = useState('');
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<unknown>(null);
  const [done, setDone] = useState(false);
  if (status !== 'running') return null;
  if (done) {
    return (
      <p class="cancel-run" id="cancel-result" role="status">
        Cancel requested: the run's end appears on the chain.
      </p>
    );
  }
  if (!open) {
    return (
      <p class="cancel-run">
        <button type="button" id="cancel-run" class="deny" onClick={() => setOpen(true)}>
          Cancel run…
        </button>
      </p>
    );
  }
  const send = () => {
    setBusy(true);
    setErr(null);
    cancelRun(id, reason).then(
      () => setDone(true),
      (e) => {
        setErr(e);
        setBusy(false);
      },
    );
  };
  return (
    <form
      class="cancel-run"
      onSubmit={(ev) => {
        ev.preventDefault();
        send();
      }}
    >
      <label>
        Why (recorded on the chain)
        <input id="cancel-reason" type="text" maxLength={500} value={reason} onInput={(ev) => setReason((ev.target as HTMLInputElement).value)} />
      </label>
      <button type="submit" id="cancel-confirm" class="deny" disabled={busy}>
        Cancel this run
      </button>
      <button type="button" disabled={busy} onClick={() => setOpen(false)}>
        Keep it running
      </button>
      {err ? <ErrorBox err={err} what="the cancellation" /> : null}
    </form>
  );
}
