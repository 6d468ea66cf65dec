import type { ComponentChildren } from 'preact';
import { errorText } from './api/client';

// Shared view pieces: tables that turn into cards on phones, paging, select options, dialog buttons.

/**
 * A `table.cards`: a header row of column names, then the rows given as children (each cell
 * carries its column name as `data-label`, which phones show in front of the value). `action`
 * adds a last, visually hidden header over a column of row buttons.
 */
export function CardTable(props: { columns: readonly string[]; action?: string; caption?: string; class?: string; children: ComponentChildren }) {
  return (
    <table class={props.class ? `cards ${props.class}` : 'cards'}>
      {props.caption ? <caption class="sr-only">{props.caption}</caption> : null}
      <thead>
        <tr>
          {props.columns.map((c) => (
            <th key={c} scope="col">
              {c}
            </th>
          ))}
          {props.action ? (
            <th scope="col">
              <span class="sr-only">{props.action}</span>
            </th>
          ) : null}
        </tr>
      </thead>
      <tbody>{props.children}</tbody>
    </table>
  );
}

/**
 * The button under a paged list while there is an older page (`next`, the cursor to pass as
 * `before`). `load` fetches and appends it; a failure goes to `onError` (cleared on the next try),
 * never unhandled.
 */
export function LoadMore(props: { next: string | undefined; label: string; load: (before: string) => Promise<unknown>; onError: (error: string | undefined) => void }) {
  const { next, load, onError } = props;
  if (!next) return null;
  const loadMore = async () => {
    onError(undefined);
    try {
      await load(next);
    } catch (err) {
      onError(errorText(err));
    }
  };
  return (
    <button type="button" class="load-more" onClick={() => void loadMore()}>
      {props.label}
    </button>
  );
}

/** The `<option>`s of a `<select>`, one a value, shown as the value or as `text` makes it. */
export function Options<T extends string>(props: { values: readonly T[]; text?: (value: T) => string }) {
  return (
    <>
      {props.values.map((v) => (
        <option key={v} value={v}>
          {props.text ? props.text(v) : v}
        </option>
      ))}
    </>
  );
}

/** A dialog form's Cancel and Save buttons. */
export function SaveCancel(props: { onCancel: () => void; disabled?: boolean }) {
  return (
    <div class="actions">
      <button type="button" onClick={props.onCancel}>
        Cancel
      </button>
      <button type="submit" class="primary" disabled={props.disabled}>
        Save
      </button>
    </div>
  );
}

/** A form's submit handler: clears `setError`, runs `action`, and shows what it throws. */
export function submitting(setError: (error: string | undefined) => void, action: () => Promise<unknown>) {
  const submit = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      await action();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (e: Event) => void submit(e);
}
