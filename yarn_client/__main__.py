from yarn_client.cli import main

main()
