// A model EVM chain behind a real JSON-RPC endpoint on 127.0.0.1, for what a ganache chain makes
// slow or impossible: reorganisations of the newest blocks, thousands of addresses, and a count of
// the requests each look at the chain makes. It answers the calls the control plane makes
// (eth_chainId, eth_blockNumber, eth_getLogs, eth_getTransactionReceipt) as a node does, for one
// ERC-20 token whose transactions each pay one or more addresses (a multisend) in a block of
// their own. Tests of the chain itself use test/support/evm-chain.ts (ganache).
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { encodeAbiParameters, encodeEventTopics, keccak256, pad, parseAbiItem, toHex, type Hex } from 'viem';

const TRANSFER = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)');
const TRANSFER_TOPIC = encodeEventTopics({ abi: [TRANSFER], eventName: 'Transfer' })[0];
const PAYER: Hex = '0x00000000000000000000000000000000000000aa';

export interface FakeTransfer {
  to: Hex;
  amount: bigint;
}
interface FakeTx {
  hash: Hex;
  transfers: FakeTransfer[];
}
interface Block {
  number: number;
  hash: Hex;
  txs: FakeTx[];
}
/** A transfer as the chain holds it now. */
export interface ChainTransfer extends FakeTransfer {
  txHash: Hex;
  logIndex: number;
  block: number;
}

export interface FakeChain {
  rpcUrl: string;
  token: Hex;
  chainId: number;
  /** Requests answered since the last reset, by method. */
  calls: Map<string, number>;
  /** One transaction paying every one of `transfers`, mined in a new block: its hash. */
  send(transfers: readonly FakeTransfer[]): Hex;
  /** Mines n empty blocks. */
  mine(n: number): void;
  /**
   * A reorganisation: the newest `depth` blocks are replaced by `depth + 1` others, the dropped
   * transactions `keep` picks included again in the first of them (so at other log indexes).
   */
  reorg(depth: number, keep: (txHash: Hex) => boolean): void;
  head(): number;
  /** Every transfer on the chain now (dropped ones are gone). */
  transfers(): ChainTransfer[];
  close(): Promise<void>;
}

export async function startFakeChain(chainId = 31_337): Promise<FakeChain> {
  const token: Hex = '0x00000000000000000000000000000000000000c0';
  const blocks: Block[] = [{ number: 0, hash: keccak256(toHex('genesis')), txs: [] }];
  let made = 0;
  const calls = new Map<string, number>();
  const newHash = (what: string) => keccak256(toHex(`${what} ${made++}`));
  const mineBlock = (txs: FakeTx[]) => blocks.push({ number: blocks.length, hash: newHash('block'), txs });

  /** The block's Transfer logs, each with its index in the block. */
  const logsOf = (b: Block) => {
    let logIndex = 0;
    return b.txs.flatMap((tx, txIndex) => tx.transfers.map((t) => ({ block: b, tx, txIndex, t, logIndex: logIndex++ })));
  };
  type Found = ReturnType<typeof logsOf>[number];
  const logJson = ({ block, tx, txIndex, t, logIndex }: Found) => ({
    address: token,
    topics: [TRANSFER_TOPIC, pad(PAYER), pad(t.to.toLowerCase() as Hex)],
    data: encodeAbiParameters([{ type: 'uint256' }], [t.amount]),
    blockNumber: toHex(block.number),
    blockHash: block.hash,
    transactionHash: tx.hash,
    transactionIndex: toHex(txIndex),
    logIndex: toHex(logIndex),
    removed: false,
  });

  const answer = (method: string, params: any[]): unknown => {
    switch (method) {
      case 'eth_chainId':
        return toHex(chainId);
      case 'eth_blockNumber':
        return toHex(blocks.length - 1);
      case 'eth_getLogs': {
        const [f] = params as [{ address?: string; topics?: (string | string[] | null)[]; fromBlock: Hex; toBlock: Hex }];
        if (f.address && f.address.toLowerCase() !== token) return [];
        const to = f.topics?.[2];
        const wanted = to == null ? undefined : new Set((Array.isArray(to) ? to : [to]).map((x) => x.toLowerCase()));
        const from = Number(f.fromBlock);
        const until = Math.min(Number(f.toBlock), blocks.length - 1);
        const found: Found[] = [];
        for (let n = from; n <= until; n++) found.push(...logsOf(blocks[n]!).filter((l) => !wanted || wanted.has(pad(l.t.to.toLowerCase() as Hex))));
        return found.map(logJson);
      }
      case 'eth_getTransactionReceipt': {
        const hash = String(params[0]).toLowerCase();
        for (const b of blocks) {
          const txIndex = b.txs.findIndex((tx) => tx.hash === hash);
          if (txIndex < 0) continue;
          return {
            transactionHash: hash,
            transactionIndex: toHex(txIndex),
            blockHash: b.hash,
            blockNumber: toHex(b.number),
            from: PAYER,
            to: token,
            cumulativeGasUsed: '0x0',
            gasUsed: '0x0',
            effectiveGasPrice: '0x0',
            contractAddress: null,
            logs: logsOf(b)
              .filter((l) => l.tx.hash === hash)
              .map(logJson),
            logsBloom: `0x${'00'.repeat(256)}`,
            status: '0x1',
            type: '0x2',
          };
        }
        return null;
      }
      default:
        throw new Error(`method ${method} is not modelled`);
    }
  };

  const body = async (req: IncomingMessage) => {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    return JSON.parse(raw) as { id: number; method: string; params?: any[] } | { id: number; method: string; params?: any[] }[];
  };
  const server = createServer(async (req, res) => {
    const one = (r: { id: number; method: string; params?: any[] }) => {
      calls.set(r.method, (calls.get(r.method) ?? 0) + 1);
      try {
        return { jsonrpc: '2.0', id: r.id, result: answer(r.method, r.params ?? []) };
      } catch (err) {
        return { jsonrpc: '2.0', id: r.id, error: { code: -32601, message: String(err) } };
      }
    };
    const request = await body(req);
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(Array.isArray(request) ? request.map(one) : one(request)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));

  return {
    rpcUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    token,
    chainId,
    calls,
    send(transfers) {
      const tx = { hash: newHash('tx'), transfers: transfers.map((t) => ({ ...t })) };
      mineBlock([tx]);
      return tx.hash;
    },
    mine(n) {
      for (let i = 0; i < n; i++) mineBlock([]);
    },
    reorg(depth, keep) {
      const dropped = blocks.splice(blocks.length - depth, depth).flatMap((b) => b.txs);
      mineBlock(dropped.filter((tx) => keep(tx.hash)).reverse());
      for (let i = 0; i < depth; i++) mineBlock([]);
    },
    head: () => blocks.length - 1,
    transfers: () => blocks.flatMap((b) => logsOf(b).map((l) => ({ ...l.t, txHash: l.tx.hash, logIndex: l.logIndex, block: b.number }))),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
