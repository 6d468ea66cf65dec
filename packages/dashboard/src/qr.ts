import { encode } from 'uqr';

// A QR code as one SVG path (no inline styles, no images: the strict CSP holds), from uqr's matrix.

/** The path of a QR matrix's dark modules, one `h1v1h-1z` square each, in module units. */
export function qrPath(modules: readonly (readonly boolean[])[]): string {
  let d = '';
  modules.forEach((row, y) =>
    row.forEach((dark, x) => {
      if (dark) d += `M${x} ${y}h1v1h-1z`;
    }),
  );
  return d;
}

/** The size (modules a side, with the quiet border) and path of `text`'s QR code. */
export function qrCode(text: string): { size: number; path: string } {
  const { size, data } = encode(text, { border: 2, ecc: 'M' });
  return { size, path: qrPath(data) };
}
