// Deposit addresses, derived from the operator's extended public key (BIP32). The control plane
// only ever holds that public key: it can compute where money should arrive but never move it.
// The operator's wallet, which holds the matching private key, spends what arrives.
import { HDKey } from '@scure/bip32';
import { bytesToHex, concat, numberToHex, type Hex } from 'viem';
import { publicKeyToAddress } from 'viem/accounts';

/** Non-hardened BIP32 child indexes are 0 .. 2^31 - 1 (hardened ones need the private key). */
const MAX_CHILD_INDEX = 2 ** 31 - 1;

/**
 * The operator's key at the deposit chain, m/44'/60'/0'/0 by convention (docs/billing.md,
 * "On-chain deposits"). Throws an Error naming RAMPART_CHAIN_XPUB when the text is not an
 * extended public key, and refuses an extended private key outright: the service must never
 * hold one, so accepting it "because it works" would hide a dangerous misconfiguration.
 */
export function parseAccountXpub(xpub: string): HDKey {
  const text = xpub.trim();
  let key: HDKey;
  try {
    key = HDKey.fromExtendedKey(text);
  } catch (err) {
    throw new Error(`RAMPART_CHAIN_XPUB is not a valid extended public key (xpub...): ${(err as Error).message}`);
  }
  if (key.privateKey) {
    throw new Error('RAMPART_CHAIN_XPUB is an extended private key (xprv...); give the extended public key (xpub...) instead, the service never needs a private key');
  }
  return key;
}

/** The checksummed Ethereum address of deposit `index`: child `index` of the xpub. */
export function depositAddress(xpub: string, index: number): `0x${string}` {
  if (!Number.isInteger(index) || index < 0 || index > MAX_CHILD_INDEX) {
    throw new RangeError(`deposit address index must be a whole number from 0 to ${MAX_CHILD_INDEX}, not ${index}`);
  }
  const child = parseAccountXpub(xpub).deriveChild(index);
  // A key parsed from an xpub always has a public key, and so do its children.
  return publicKeyToAddress(uncompressedPublicKey(child.publicKey!));
}

// secp256k1's field prime. p ≡ 3 (mod 4), so a square root of a is a^((p + 1) / 4).
const P = 2n ** 256n - 2n ** 32n - 977n;

/**
 * BIP32 keys are compressed (0x02/0x03 ‖ x) while an Ethereum address hashes the uncompressed
 * point (0x04 ‖ x ‖ y): recover y from the curve y² = x³ + 7 and the parity the prefix gives.
 * The point came from HDKey, which already checked it lies on the curve.
 */
function uncompressedPublicKey(compressed: Uint8Array): Hex {
  const xHex = bytesToHex(compressed.subarray(1));
  const x = BigInt(xHex);
  let y = modPow((x ** 3n + 7n) % P, (P + 1n) / 4n);
  if ((y & 1n) !== BigInt(compressed[0]! & 1)) y = P - y;
  return concat(['0x04', xHex, numberToHex(y, { size: 32 })]);
}

function modPow(base: bigint, exponent: bigint): bigint {
  let result = 1n;
  let b = base % P;
  for (let e = exponent; e > 0n; e >>= 1n) {
    if (e & 1n) result = (result * b) % P;
    b = (b * b) % P;
  }
  return result;
}
