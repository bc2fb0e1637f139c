/* tests/fuzz/fuzz_keys: the fixed keys the fuzz targets and their corpus generator share (never
 * used outside tests). */
#ifndef AIRLOCK_TESTS_VAULT_FUZZ_KEYS_H
#define AIRLOCK_TESTS_VAULT_FUZZ_KEYS_H

#define FUZZ_MASTER_BYTE 0x42 /* vault master key: 32 x 0x42 */
#define FUZZ_DATA_BYTE   0x24 /* data key used when the header's key does not unwrap */
#define FUZZ_SIGN_SEED   0x11 /* audit log Ed25519 seed: 32 x 0x11 */
#define FUZZ_LOG_ID      "f022f022f022f022f022f022f022f022"
#define FUZZ_FILE_SPLIT  "\f\n" /* separates the files of one audit log input */

#endif
