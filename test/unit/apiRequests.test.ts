import assert from 'node:assert/strict';
import { stops } from '../../server/src/api/requests';

describe('local API request fields', () => {
  it('takes the dozen stop strings a FIM client sends, as vLLM and llama-server do, and refuses more than 32', () => {
    const twelve = Array.from({ length: 12 }, (_, i) => `<stop${i}>`);
    assert.deepEqual(stops({ stop: twelve }), twelve);
    assert.deepEqual(stops({ stop: '\n\n' }), ['\n\n']);
    assert.equal(stops({}), undefined);
    assert.throws(() => stops({ stop: Array.from({ length: 33 }, () => 'x') }), /up to 32 strings/);
    assert.throws(() => stops({ stop: ['ok', 3] }), /stop/);
  });
});
