from pytest_ditar.cli.main import main

raise SystemExit(main())
