import sys

from lab.mutation.runner import main

sys.exit(main())
