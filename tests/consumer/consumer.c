/* The C ABI from a C program built with pkg-config (tools/check-packages.sh):
 *   cc consumer.c $(pkg-config --cflags --libs flash4)
 * It needs no GPU: it checks the library's version and that a malformed call is refused with a message. */
#include <flash4/flash4.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  flash4_fwd_params params;
  flash4_status status;
  if (strcmp(flash4_version_string(), FLASH4_EXPECTED_VERSION) != 0) {
    fprintf(stderr, "consumer: libflash4 is version %s, expected %s\n", flash4_version_string(),
            FLASH4_EXPECTED_VERSION);
    return 1;
  }
  memset(&params, 0, sizeof params); /* struct_size 0: refused before anything else is read */
  status = flash4_fwd_check(&params);
  if (status != FLASH4_ERROR_INVALID_STRUCT_SIZE || flash4_last_error_message()[0] == '\0') {
    fprintf(stderr, "consumer: expected FLASH4_ERROR_INVALID_STRUCT_SIZE with a message, got %s\n",
            flash4_status_string(status));
    return 1;
  }
  printf("consumer (C): flash4 %s; a zero struct_size gives %s: %s\n", flash4_version_string(),
         flash4_status_string(status), flash4_last_error_message());
  return 0;
}
